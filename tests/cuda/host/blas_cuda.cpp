// tests/cuda/host/blas_cuda.cpp -- the host CUDA's cuBLAS and cuBLASLt: the calls kiln makes,
// with cublas_api.h's and cublasLt.h's types, computing on the host in double (reference loops)
// on the handle's (or call's) stream, in stream order. kiln loads it instead of libcublas and
// libcublasLt when KILN_CUDA_CUBLAS and KILN_CUDA_CUBLASLT name it. Its cuBLASLt finds no
// algorithm while KILN_HOST_CUBLASLT_REFUSE is set, so that kiln's fallback runs in CI too.
// Its algorithms, as a GPU's, assume the operands' alignment the preferences state (256 bytes
// unless told less), and a call whose pointers break that is refused (on a GPU: the kernel
// faults); KILN_HOST_CUBLASLT_REFUSE=matmul refuses every call after the heuristics.
#include <cublasLt.h>
#include <cublas_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/half.h"
#include "tests/cuda/host/queue_cuda.h"

// A handle takes some device memory, and a GEMM on a stream with no workspace of the caller's
// takes cuBLAS's own for the handle, as the real library does (outside kiln's cache).
struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // the caller's, until the next cublasSetStream
  bool own_workspace = false;
};

constexpr long long kHandleBytes = 1 << 20, kOwnWorkspaceBytes = 4 << 20;

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
  if (!kiln_host_reserve(kHandleBytes)) return CUBLAS_STATUS_ALLOC_FAILED;
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

// As cuBLAS's: the stream's change puts the handle back on its own workspace.
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  h->workspace = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes) {
  if (!workspace || !kiln_host_device_range(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = workspace;
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
  if (!h->workspace && !h->own_workspace) {
    if (!kiln_host_reserve(kOwnWorkspaceBytes)) return CUBLAS_STATUS_ALLOC_FAILED;
    h->own_workspace = true;
  }
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(h->stream),
      [=] {
        for (int q = 0; q < batch; ++q)
          for (int j = 0; j < n; ++j)
            for (int i = 0; i < m; ++i) {
              double acc = 0;
              for (int l = 0; l < k; ++l) {
                long long ia =
                    ta == CUBLAS_OP_N ? i + static_cast<long long>(l) * lda : l + static_cast<long long>(i) * lda;
                long long ib =
                    tb == CUBLAS_OP_N ? l + static_cast<long long>(j) * ldb : j + static_cast<long long>(l) * ldb;
                acc += load(a, at, q * sa + ia) * load(b, bt, q * sb + ib);
              }
              store(c, ct, q * sc + i + static_cast<long long>(j) * ldc, acc);
            }
      },
      "host_cublas_gemm");
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

// ---- cuBLASLt: the matmul with a bias epilogue (what kiln's addmm ops call) ----------------

namespace {

struct LtDesc {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};
struct LtPreference {
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: what an algorithm may assume
};
struct LtLayout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};

template <class T, class H> T* as(H h) { return reinterpret_cast<T*>(h); }

// The tanh approximation of gelu, as cuBLASLt's GELU epilogue computes it.
double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  static int one;
  if (!kiln_host_reserve(kHandleBytes)) return CUBLAS_STATUS_ALLOC_FAILED;
  *h = reinterpret_cast<cublasLtHandle_t>(&one);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType_t) {
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new LtDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete as<LtDesc>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  LtDesc& x = *as<LtDesc>(d);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: std::memcpy(&x.ta, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: std::memcpy(&x.tb, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: std::memcpy(&x.epilogue, buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: std::memcpy(&x.bias, buf, size); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (ld < static_cast<int64_t>(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(new LtLayout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete as<LtLayout>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new LtPreference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete as<LtPreference>(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  LtPreference& x = *as<LtPreference>(p);
  int k = attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
          : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
          : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
          : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES ? 3
                                                               : -1;
  if (k < 0) return CUBLAS_STATUS_SUCCESS;  // the workspace cap: no workspace here
  if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&x.align[k], buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

// One algorithm, with no workspace, for the epilogues kiln uses; none when refusing.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *found = 0;
  cublasLtEpilogue_t e = as<LtDesc>(d)->epilogue;
  const char* refuse = std::getenv("KILN_HOST_CUBLASLT_REFUSE");
  bool known = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS;
  if ((refuse && *refuse && std::string(refuse) != "matmul") || !known) return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  // The algorithm assumes the alignments the preferences allowed, and the bias's as the
  // descriptor's bias pointer has it (cuBLASLt reads the bias's alignment from the pointer set
  // before this query; there is no preference for it).
  for (int k = 0; k < 4; ++k) results[0].algo.data[k] = as<LtPreference>(pref)->align[k];
  uint64_t bias_align = 256;
  while (bias_align > 1 && reinterpret_cast<uintptr_t>(as<LtDesc>(d)->bias) % bias_align != 0) bias_align /= 2;
  results[0].algo.data[4] = bias_align;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D = epilogue(op(A) op(B) + bias), column-major, alpha 1 and beta 0 (what kiln passes).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void*, const void* a,
                              cublasLtMatrixLayout_t al, const void* b, cublasLtMatrixLayout_t bl, const void*,
                              const void* c, cublasLtMatrixLayout_t, void* d, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
  const char* refuse = std::getenv("KILN_HOST_CUBLASLT_REFUSE");
  if (refuse && std::string(refuse) == "matmul") return CUBLAS_STATUS_NOT_SUPPORTED;
  const void* operands[4] = {a, b, c, d};
  for (int k = 0; k < 4; ++k)
    if (algo && reinterpret_cast<uintptr_t>(operands[k]) % algo->data[k] != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  LtDesc x = *as<LtDesc>(desc);
  if (algo && reinterpret_cast<uintptr_t>(x.bias) % algo->data[4] != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  LtLayout A = *as<LtLayout>(al), B = *as<LtLayout>(bl), D = *as<LtLayout>(dl);
  uint64_t m = D.rows, n = D.cols, k = x.ta == CUBLAS_OP_N ? A.cols : A.rows;
  if ((x.ta == CUBLAS_OP_N ? A.rows : A.cols) != m || (x.tb == CUBLAS_OP_N ? B.rows : B.cols) != k ||
      (x.tb == CUBLAS_OP_N ? B.cols : B.rows) != n || !x.bias)
    return CUBLAS_STATUS_INVALID_VALUE;
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(stream),
      [=] {
        for (uint64_t j = 0; j < n; ++j)
          for (uint64_t i = 0; i < m; ++i) {
            double acc = 0;
            for (uint64_t l = 0; l < k; ++l) {
              long long ia =
                  x.ta == CUBLAS_OP_N ? static_cast<long long>(i + l * A.ld) : static_cast<long long>(l + i * A.ld);
              long long ib =
                  x.tb == CUBLAS_OP_N ? static_cast<long long>(l + j * B.ld) : static_cast<long long>(j + l * B.ld);
              acc += load(a, A.type, ia) * load(b, B.type, ib);
            }
            // As cuBLASLt: the product rounded to the output's type is not formed; the bias is added
            // to the accumulator (in the compute type) and the result rounded once.
            double z = acc + load(x.bias, D.type, static_cast<long long>(i));
            if (x.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) z = z < 0 ? 0 : z;
            if (x.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) z = gelu_tanh(z);
            store(d, D.type, static_cast<long long>(i + j * D.ld), z);
          }
      },
      "host_cublaslt_matmul");
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
