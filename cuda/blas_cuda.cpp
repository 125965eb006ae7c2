// cuda/blas_cuda.cpp -- cuBLAS, loaded with dlopen (KILN_CUDA_CUBLAS, else the CUDA 13
// or 12 libcublas on the library path or in /usr/local/cuda), so a build runs without it: a
// matmul on CUDA then says why. A handle per thread and device from a pool (handles_cuda.h:
// cuBLAS handles are not to be shared between threads at once, and a thread that ends gives its
// back), set to the current stream at each call with that stream's workspace from the caching
// allocator (use_stream): cuBLAS's own would be taken outside the cache.
#include <cublas_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "cuda/gemm_types_cuda.h"
#include "cuda/libraries.h"
#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda/handles_cuda.h"
#include "runtime/cuda/library_cuda.h"
#include "runtime/cuda_internal.h"

namespace kiln::cuda {
namespace {

// cublas_api.h overloads cublasGemmStridedBatchedEx in C++ (an inline taking the older compute
// type): the C entry point's type, written out.
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                const void*, const void*, cudaDataType, int, long long, const void*,
                                                cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                long long, int, cublasComputeType_t, cublasGemmAlgo_t);

struct Cublas {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t) = nullptr;
  GemmStridedBatchedEx gemm = nullptr;
  bool ok = false;
  std::string reason;
};

Cublas load_cublas() {
  Cublas c;
  void* lib = open_library("KILN_CUDA_CUBLAS",
                           {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13", "libcublas.so.12",
                            "/usr/local/cuda/lib64/libcublas.so.12"},
                           "cuBLAS", &c.reason);
  if (!lib) return c;
  c.create = reinterpret_cast<decltype(c.create)>(dlsym(lib, "cublasCreate_v2"));
  c.set_stream = reinterpret_cast<decltype(c.set_stream)>(dlsym(lib, "cublasSetStream_v2"));
  c.set_workspace = reinterpret_cast<decltype(c.set_workspace)>(dlsym(lib, "cublasSetWorkspace_v2"));
  c.gemm = reinterpret_cast<GemmStridedBatchedEx>(dlsym(lib, "cublasGemmStridedBatchedEx"));
  c.ok = c.create && c.set_stream && c.set_workspace && c.gemm;
  if (!c.ok)
    c.reason = "cuBLAS lacks cublasCreate_v2, cublasSetStream_v2, cublasSetWorkspace_v2 or cublasGemmStridedBatchedEx";
  return c;
}

const Cublas& cublas() {
  static const Cublas c = load_cublas();
  return c;
}

void check_blas(cublasStatus_t s, const char* call) {
  KILN_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuda: {} failed with cuBLAS status {}", call, static_cast<int>(s));
}

cublasHandle_t cublas_handle(int device) {
  static auto* pool = new HandlePool<cublasHandle_t>([](int d) {
    cublasHandle_t h = nullptr;
    check_blas(
        retry_out_of_memory(
            d, [&] { return cublas().create(&h); }, [](cublasStatus_t s) { return s == CUBLAS_STATUS_ALLOC_FAILED; }),
        "cublasCreate");
    return h;
  });
  return pool->get(device);
}

// cuBLAS's workspace on Hopper and later is 32 MiB, before it 8 MiB (PyTorch's sizes).
size_t workspace_bytes(int device) { return compute_capability(device) >= 90 ? size_t{32} << 20 : size_t{8} << 20; }

// Sets h to `stream` with a workspace from the caching allocator (cublasSetStream resets it to
// cuBLAS's own, so it is set after it, every call): one per stream, kept (a stream runs its
// GEMMs in order, so the handles of every thread on it can share one, and a handle's next
// thread on another stream uses that stream's). Under a capture, one of the graph's own (its
// private pool), held by `held` for the call: graphs captured on one stream may replay at once
// on two.
void use_stream(cublasHandle_t h, int device, CUstream stream, Tensor* held) {
  static std::mutex mu;
  static auto* spaces = new std::map<CUstream, void*>;  // kept, as the handles
  const size_t bytes = workspace_bytes(device);
  void* space = nullptr;
  if (is_capturing(reinterpret_cast<uintptr_t>(stream))) {
    *held = Tensor::empty({DType::U8, {static_cast<int64_t>(bytes)}, cuda::device(device)});
    space = held->data_ptr();
  } else {
    std::lock_guard<std::mutex> lock(mu);
    void*& p = (*spaces)[stream];
    if (!p) p = device_allocator(device).allocate(bytes, reinterpret_cast<StreamHandle>(stream));
    space = p;
  }
  check_blas(cublas().set_stream(h, reinterpret_cast<cudaStream_t>(stream)), "cublasSetStream");
  check_blas(cublas().set_workspace(h, space, bytes), "cublasSetWorkspace");
}

int fits_cublas(int64_t v, const char* what) {
  KILN_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "matmul: {} {} is beyond what cuBLAS takes", what, v);
  return static_cast<int>(v);
}

}  // namespace

void gemm(int device, DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const void* a,
          int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
          int64_t stride_c, int64_t batch) {
  const Cublas& blas = cublas();
  KILN_CHECK(blas.ok, "matmul: cuBLAS is not available: {}", blas.reason);
  bind(device, "matmul");
  GemmTypes t;
  KILN_CHECK(gemm_types(dtype, &t), "matmul: cuBLAS takes float dtypes, not {}", dtype_name(dtype));
  cublasHandle_t h = cublas_handle(device);
  Tensor captured_workspace;
  use_stream(h, device, current(device), &captured_workspace);
  check_blas(
      blas.gemm(h, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                fits_cublas(m, "m"), fits_cublas(n, "n"), fits_cublas(k, "k"), t.alpha(), a, t.type,
                fits_cublas(lda, "lda"), stride_a, b, t.type, fits_cublas(ldb, "ldb"), stride_b, t.beta(), c, t.type,
                fits_cublas(ldc, "ldc"), stride_c, fits_cublas(batch, "batch"), t.compute, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

}  // namespace kiln::cuda
