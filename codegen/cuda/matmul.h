// codegen/cuda/matmul.h -- matmul of integer dtypes on CUDA, which cuBLAS does not do: a thread
// per output element, summing in 64-bit integers as the CPU's loop does (the result wraps into
// the dtype), any strides. Float matmuls go to cuBLAS (cuda/libraries.h: gemm).
#pragma once

#include <string>

#include "runtime/dtype.h"

namespace kiln::codegen {

/// Argument struct (64-bit words): batch, m, n, k, a's strides (batch, row, column), b's, then
/// a, b and c (c contiguous [batch, m, n]).
std::string cuda_int_matmul_kernel(DType t);

}  // namespace kiln::codegen
