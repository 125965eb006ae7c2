// codegen/cuda/emit.h -- a fused group (or one op) as CUDA C, from the same formulas, cast rule
// and reduction data as the CPU kernels and the LLVM emitter (runtime/ops/formulas.h,
// runtime/dtype.h, runtime/op.h). Pure string building: no CUDA header, no GPU. The text
// compiles with NVRTC for a device and, unchanged, for the host against the tests' emulation
// header (tests/cuda/host), so the generator's index math and reductions run in CI.
//
// The kernel takes one argument, a struct of 64-bit words (pack_cuda_args() builds it):
//   size[rank], stride[(inputs + outputs) * rank] (elements), data[inputs + outputs],
//   parts, chunk, imm[immediates] (with CudaEmitOptions::immediates_as_args)
// and runs with kCudaBlock threads per block and kCudaSharedBytes of dynamic shared memory,
// launched as codegen/cuda/launch.h plans:
// - no reduction: a grid-stride loop over every element of the domain;
// - reductions (over any dims): a grid-stride loop over tasks, each a kept index (a row) and
//   one of `parts` chunks of `chunk` reduced elements (columns). A block per task
//   (CudaRows::Block): per reduction level its threads stride over the chunk and combine in
//   registers, then across the block (warp shuffles, then shared memory). A thread per task
//   (CudaRows::Thread): it walks the chunk in order. A reduced output's element of part p
//   lies p * rows elements past the row's (partial results [parts, output...]); with one
//   part, a last pass stores the full outputs (softmax from primitives is one kernel).
// Partial results are combined by a second kernel, or, where that kernel would be one block
// (CudaEmitOptions::combines), by the kernel's own last block: each block counts itself done
// on a counter (an atomic add, after a fence that makes its stores visible); the block that
// counts last runs the combines, in the same order a kernel of their own would, so the bits
// do not change with who combines. PyTorch's reductions finish the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/cuda/launch.h"

namespace kiln::codegen {

inline constexpr int kCudaBlock = 256;
inline constexpr int kCudaSharedBytes = 64 * 8;  // two 8-byte values per warp, for block reductions

struct CudaEmitOptions {
  /// Read pointwise immediates from the argument struct instead of baking them into the text:
  /// the eager kernels, where `x * lr` must not compile a kernel per learning rate.
  bool immediates_as_args = false;
  /// Read every operand's strides from the arguments, ignoring which dims the layout says an
  /// input broadcasts along (stride 0) or steps through with stride 1: one kernel serves every
  /// layout of the same rank and reduced dims (the eager kernels, where compiling is the cost).
  bool generic_strides = false;
  /// How a reduction's rows map to threads (plan_cuda_launch decides).
  CudaRows rows_by = CudaRows::Block;
  /// Index in 32 bits (CudaLaunch::index32): the argument struct then ends with each size's
  /// divisor (cuda_divisor), before the immediates.
  bool index32 = false;
  /// Groups that reduce this kernel's partial results, run by its last block (see above): each
  /// is emitted as a device function over arguments of its own, which follow this kernel's in
  /// the argument struct, and then one more word, the counter (a u32, zero at launch).
  struct Combine {
    const ir::Graph* body = nullptr;
    KernelLayout layout;
    CudaRows rows_by = CudaRows::Thread;
    bool index32 = false;
  };
  std::vector<Combine> combines;
  /// A batch kernel (a multi-tensor apply, as PyTorch's optimizers launch): its argument is
  /// `segments` of the plain kernel's argument structs, their count and the first block of
  /// each (pack_cuda_batch). Block b runs the segment whose blocks hold it, exactly as that
  /// segment's own kernel would with its own grid: one launch updates every parameter.
  /// Without combines (their counter would be shared); 0: a plain kernel.
  int segments = 0;
};

/// The CUDA C of kernel `symbol` computing `body` over `layout`. Throws kiln::Error for an op
/// it cannot lower.
std::string emit_cuda(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol,
                      const CudaEmitOptions& options = {});

/// The helpers every kernel's text starts with (shared memory, f16 and bf16 conversions,
/// saturating float-to-integer conversion), for hand-written kernels (codegen/cuda/indexed.h).
std::string cuda_prelude();

/// The C type an element of dtype t is stored as: float, double, int, long long, unsigned char
/// (u8 and bool), and the bits of f16 and bf16 as unsigned short.
const char* cuda_element_type(DType t);

/// The unsigned C type of the element's size ("unsigned short" for f16): what a kernel that
/// moves or compares an element's bits reads it as.
const char* cuda_bits_type(DType t);

/// The immediates of `body`'s nodes in the order the argument struct holds them: as the bits
/// of a double when the op computes in a float dtype, else as an int64.
struct CudaImmediate {
  size_t node = 0;
  int slot = 0;
  bool is_float = false;
};
std::vector<CudaImmediate> cuda_immediates(const ir::Graph& body);

/// The argument struct's words: sizes, strides, data pointers, the launch's parts and chunk,
/// then immediates.
std::vector<uint64_t> pack_cuda_args(const KernelLayout& layout, const std::vector<int64_t>& sizes,
                                     const std::vector<int64_t>& strides, const std::vector<void*>& data,
                                     const CudaLaunch& launch, const std::vector<uint64_t>& immediates = {});

/// The most bytes of arguments one launch takes: CUDA 12.1's limit on Volta and later (CUDA 13
/// targets nothing older).
inline constexpr size_t kCudaMaxArgBytes = 32764;

/// The argument words of a batch kernel (CudaEmitOptions::segments == `capacity`) over
/// `segments` (each a plain kernel's pack_cuda_args words, all of one length) whose own
/// launches have `blocks` blocks each (every one at least 1). The grid is their sum.
std::vector<uint64_t> pack_cuda_batch(const std::vector<std::vector<uint64_t>>& segments,
                                      const std::vector<int64_t>& blocks, int capacity);
/// The most segments of `segment_words` words a batch kernel's arguments hold.
int cuda_batch_capacity(size_t segment_words);

}  // namespace kiln::codegen
