// codegen/cuda/pool.h -- max_pool2d, avg_pool2d, max_pool2d_indices and their backward ops on
// CUDA, written from the CPU's window rules (runtime/ops/pool.cpp) so every device gives the
// same answer: a window clipped to the input, the first largest element (the first NaN wins),
// avg's divisor with or without the padding, f16 and bf16 computing in f32.
//
// The forward runs a thread per output element, in the CPU's loop order. The backward runs a
// thread per input element, adding the gradients of the windows that hold it in window order:
// the order the CPU's serial loop adds them in, so the sums are the CPU's, bit for bit, with
// no atomics. (cuDNN's pooling has no indices, no ceil_mode and leaves ties unspecified, which
// is why these are kiln's own, as PyTorch's are.)
#pragma once

#include <string>

#include "runtime/dtype.h"

namespace kiln::codegen {

enum class CudaPool { Max, Avg, Indices };

/// Argument struct (64-bit words): planes, h, w, oh, ow, kernel[2], stride[2], padding[2],
/// count_include_pad, x's inner, outer_st, inner_st, row_st, col_st (rank 3 or 4: the planes are
/// the leading dims), x, out (contiguous [planes, oh, ow]).
std::string cuda_pool_kernel(CudaPool kind, DType t);

/// Argument struct: planes, h, w, oh, ow, kernel[2], stride[2], padding[2], count_include_pad,
/// grad's five plane strides, x's five (max only; zeros for avg), grad, x, out (contiguous
/// [planes, h, w]).
std::string cuda_pool_backward_kernel(CudaPool kind, DType t);

}  // namespace kiln::codegen
