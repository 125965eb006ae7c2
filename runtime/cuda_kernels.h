// runtime/cuda_kernels.h -- the CUDA backend's kernels that come from above. The runtime sits
// below the code generators, so the single-op kernels of the op list (generated from the same
// formulas as the CPU's, compiled with NVRTC) are installed here by jit/ when the library loads,
// as distributed/ installs the collective engine; ops backed by CUDA libraries (matmul through
// cuBLAS, conv2d and the pools through cuDNN) are the runtime's own. No CUDA header here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/op.h"

namespace kiln::cuda {

/// Runs one op on CUDA tensors, queued on the current stream of their device. `out` is fresh
/// and contiguous; the inputs are on its device, or 0-d CPU tensors.
using OpKernel = void (*)(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out);
void set_op_kernel(OpId id, OpKernel kernel);
/// The installed kernel of op `id`, or nullptr.
OpKernel op_kernel(OpId id);

/// dst = src on one CUDA device: src broadcast to dst's shape and converted to its dtype, any
/// strides on either side.
using CopyKernel = void (*)(const Tensor& src, const Tensor& dst);
void set_copy_kernel(CopyKernel kernel);

/// A kernel of a loaded module, on one device.
struct DeviceFunction {
  uintptr_t function = 0;  // a CUfunction
  int device = -1;
};
/// Loads `image` (a cubin) on device `device` and returns its kernel `name`; the module stays
/// loaded for the process. Throws kiln::Error naming the kernel.
DeviceFunction load_function(int device, const std::string& image, const std::string& name);
/// Queues `f` on the current stream of its device: grid and block sizes in x, y, z, dynamic
/// shared memory in bytes, and a pointer to each argument (cuLaunchKernel's convention).
void launch(const DeviceFunction& f, const unsigned grid[3], const unsigned block[3], size_t shared_bytes, void** args);
/// cuBLAS (loaded with dlopen: KILN_CUDA_CUBLAS, else libcublas of CUDA 13 or 12), in its
/// column-major terms: C = op(A) op(B), m x n, over `batch` matrices `stride_*` elements apart,
/// queued on the current stream of `device`. f32 (with TF32 when cuda::allow_tf32()), f64,
/// and f16 and bf16 computing in f32. Throws kiln::Error when cuBLAS is unavailable.
void gemm(int device, DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c,
          int64_t ldc, int64_t stride_c, int64_t batch);

/// The device's compute capability as NVRTC names architectures: 90 for 9.0.
int compute_capability(int device);
/// The device's streaming multiprocessors (to size grids).
int multiprocessor_count(int device);

}  // namespace kiln::cuda
