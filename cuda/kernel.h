// cuda/kernel.h -- your own CUDA kernels (MLX's mx.fast.cuda_kernel): the body of a CUDA C
// kernel, compiled by NVRTC for the device's architecture on first use, cached in memory and on
// disk (the key holds the whole text), and launched on kiln's current stream, where a CUDA
// graph capture records it like any kernel.
//
//   cuda::Kernel scale("scale", {"x"}, {"y"}, R"(
//     long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
//     if (i < y_dims.numel) y[i] = x[i] * (T)F;
//   )");
//   cuda::KernelCall call;
//   call.output_shapes = {x.shape()};
//   call.output_dtypes = {x.dtype()};
//   call.template_args = {{"T", x.dtype()}, {"F", int64_t{3}}};
//   Tensor y = scale({x}, call)[0];   // one thread per element of y by default
//
// kiln writes the signature around the body (codegen/cuda/user_kernel.h): per input
// `const T* x` and `const kiln_dims x_dims`, per output `T* y` and `kiln_dims y_dims`
// (`size[8]`, `stride[8]` in elements, `ndim`, `numel`; `kiln_offset(i, x_dims)` is the offset
// of flat index i). Inputs are made contiguous first unless told otherwise. f16 and bf16
// elements are their bits (`unsigned short`): kiln_h2f / kiln_f2h and kiln_bf2f / kiln_f2bf
// convert. A compile error is a kiln::Error with NVRTC's log, whose lines are the body's own.
// A user kernel runs eagerly; its outputs carry no gradient.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/dims.h"
#include "runtime/tensor.h"

namespace kiln::cuda {

/// A template argument: a dtype (a type alias in the kernel) or a number (a constant).
using KernelTemplateArg = std::variant<DType, int64_t, bool>;

/// One call's outputs, template arguments and launch shape.
struct KernelCall {
  std::vector<Dims> output_shapes;  // one per output name
  std::vector<DType> output_dtypes;
  std::vector<std::pair<std::string, KernelTemplateArg>> template_args;
  /// Blocks and threads per block. A zero grid runs one thread per element of the first output,
  /// in blocks of block[0] threads.
  std::array<int64_t, 3> grid{0, 0, 0};
  std::array<int64_t, 3> block{256, 1, 1};
  int64_t shared_bytes = 0;          // dynamic shared memory (kiln_shared<T>() points to it)
  std::optional<double> init_value;  // fill the outputs with it before the kernel runs
  bool contiguous_inputs = true;     // MLX's ensure_row_contiguous
  /// Where the kernel runs when it has no inputs (else its inputs' device).
  std::optional<Device> device;
};

class Kernel {
 public:
  /// `source` is the kernel's body. `header` goes before the kernel: device functions, macros.
  Kernel(std::string name, std::vector<std::string> input_names, std::vector<std::string> output_names,
         std::string source, std::string header = "");
  /// Runs the kernel on `inputs` (one per input name, on one CUDA device) and returns its
  /// outputs. Throws kiln::Error for a wrong count, device or name, or a kernel that does not
  /// compile, and inside jit::trace (a user kernel is no op of the IR).
  std::vector<Tensor> operator()(std::span<const Tensor> inputs, const KernelCall& call) const;
  std::vector<Tensor> operator()(std::initializer_list<Tensor> inputs, const KernelCall& call) const {
    return (*this)(std::span<const Tensor>(inputs.begin(), inputs.size()), call);
  }
  /// The whole CUDA C text kiln compiles for inputs of these dtypes and this call.
  std::string full_source(std::span<const DType> input_dtypes, const KernelCall& call) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::vector<std::string> inputs_, outputs_;
  std::string source_, header_;
  // Its compiled variants by dtypes, template arguments and device, so a call that has run
  // before writes and hashes no text (shared by copies).
  struct Variants;
  std::shared_ptr<Variants> variants_;
};

}  // namespace kiln::cuda
