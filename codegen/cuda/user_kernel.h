// codegen/cuda/user_kernel.h -- the CUDA C around a user's kernel body (cuda::Kernel,
// runtime/cuda.h; MLX's fast.cuda_kernel): kiln writes the signature, each operand's sizes and
// strides, the template arguments as aliases and constants, and the prelude every kiln kernel
// starts with (f16/bf16 conversions), then the body under `#line 1 "<name>"`, so the compiler's
// messages carry the user's own line numbers. Pure text: the CUDA layer compiles and launches it.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/dtype.h"

namespace kiln::codegen {

/// The most dims an operand of a user kernel may have (its sizes and strides are arrays of it).
inline constexpr int kUserKernelMaxDims = 8;

/// A user kernel's template argument: a dtype (written as a type alias) or a number (a
/// constant), as MLX's `template=[("T", mx.float32), ("N", 4)]`.
using UserKernelTemplateArg = std::variant<DType, int64_t, bool>;

/// What the text depends on: the kernel's own parts, and the dtypes of this call's operands.
struct UserKernelText {
  std::string name;  // names the kernel in messages and `#line`
  std::vector<std::string> input_names, output_names;
  std::vector<DType> input_dtypes, output_dtypes;
  std::string source;  // the body
  std::string header;  // device functions and includes, before the kernel
  std::vector<std::pair<std::string, UserKernelTemplateArg>> template_args;
};

/// Throws kiln::Error, naming the kernel, unless the names are C identifiers kiln does not use
/// (no `kiln_` prefix), distinct from each other, and the kernel's name has no quote or line
/// break.
void check_user_kernel_names(const UserKernelText& k);

/// The whole text of the kernel, whose entry point is `kiln_kernel` (cuda/kernel_cache.h names
/// it by hash). Its parameters, in order: per input `const T* __restrict__ <name>` and
/// `const kiln_dims <name>_dims`, then per output `T* __restrict__ <name>` and
/// `const kiln_dims <name>_dims`. kiln_dims holds `size[8]`, `stride[8]` (in elements), `ndim`
/// and `numel`; `kiln_offset(i, d)` is the element offset of flat index i (row-major) in d.
/// f16 and bf16 elements are their bits (`unsigned short`): kiln_h2f/kiln_f2h and
/// kiln_bf2f/kiln_f2bf convert them.
std::string user_kernel_source(const UserKernelText& k);

}  // namespace kiln::codegen
