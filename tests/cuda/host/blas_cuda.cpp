// tests/cuda/host/blas_cuda.cpp -- the host CUDA's cuBLAS: the calls kiln makes, with
// cublas_api.h's types, computing on the host in double (reference loops) on the handle's
// stream, in stream order. kiln loads it instead of libcublas when KILN_CUDA_CUBLAS names it.
#include <cublas_api.h>

#include <cstring>
#include <vector>

#include "runtime/half.h"
#include "tests/cuda/host/queue_cuda.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

double load(const void* p, cudaDataType t, long long i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_64F: return static_cast<const double*>(p)[i];
    case CUDA_R_16F: return kiln::Half::to_float(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16BF: return kiln::BFloat16::to_float(static_cast<const uint16_t*>(p)[i]);
    default: return 0;
  }
}

void store(void* p, cudaDataType t, long long i, double v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case CUDA_R_64F: static_cast<double*>(p)[i] = v; break;
    case CUDA_R_16F: static_cast<uint16_t*>(p)[i] = kiln::Half::from_float(static_cast<float>(v)); break;
    case CUDA_R_16BF: static_cast<uint16_t*>(p)[i] = kiln::BFloat16::from_float(static_cast<float>(v)); break;
    default: break;
  }
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

// Column-major, as cuBLAS: C[i + j ldc] = sum_l op(A)[i, l] op(B)[l, j], alpha 1 and beta 0
// (what kiln passes; anything else is refused).
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* a, cudaDataType at, int lda,
                                          long long sa, const void* b, cudaDataType bt, int ldb, long long sb,
                                          const void* beta, void* c, cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  bool f64 = compute == CUBLAS_COMPUTE_64F;
  double one = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  double zero = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  if (one != 1 || zero != 0 || at != bt || at != ct || m < 0 || n < 0 || k < 0 || batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
    return CUBLAS_STATUS_INVALID_VALUE;
  kiln_host_enqueue(reinterpret_cast<CUstream>(h->stream), [=] {
    for (int q = 0; q < batch; ++q)
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double acc = 0;
          for (int l = 0; l < k; ++l) {
            long long ia = ta == CUBLAS_OP_N ? i + static_cast<long long>(l) * lda : l + static_cast<long long>(i) * lda;
            long long ib = tb == CUBLAS_OP_N ? l + static_cast<long long>(j) * ldb : j + static_cast<long long>(l) * ldb;
            acc += load(a, at, q * sa + ia) * load(b, bt, q * sb + ib);
          }
          store(c, ct, q * sc + i + static_cast<long long>(j) * ldc, acc);
        }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
