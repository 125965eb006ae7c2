// cuda/gemm_types_cuda.h -- how a kiln dtype is multiplied by cuBLAS and cuBLASLt, in
// one place: the matrices' CUDA type, the compute type (f32 with TF32 only when
// cuda::allow_tf32(); f16 and bf16 computing in f32), and alpha 1 and beta 0 in the scale type.
// Internal to the CUDA files.
#pragma once

#include <cublas_api.h>

#include "runtime/cuda.h"
#include "runtime/dtype.h"

namespace kiln::cuda {

struct GemmTypes {
  cudaDataType type = CUDA_R_32F, scale = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  float one32 = 1, zero32 = 0;
  double one64 = 1, zero64 = 0;
  const void* alpha() const { return scale == CUDA_R_64F ? static_cast<const void*>(&one64) : &one32; }
  const void* beta() const { return scale == CUDA_R_64F ? static_cast<const void*>(&zero64) : &zero32; }
};

/// The types of a GEMM in `dtype`; false for a dtype cuBLAS does not multiply (not a float).
inline bool gemm_types(DType dtype, GemmTypes* t) {
  switch (dtype) {
    case DType::F32: t->compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; return true;
    case DType::F64:
      t->type = t->scale = CUDA_R_64F;
      t->compute = CUBLAS_COMPUTE_64F;
      return true;
    case DType::F16: t->type = CUDA_R_16F; return true;
    case DType::BF16: t->type = CUDA_R_16BF; return true;
    default: return false;
  }
}

}  // namespace kiln::cuda
