// cuda/blaslt_cuda.cpp -- cuBLASLt's GEMM with a bias and activation epilogue (the
// addmm ops on CUDA), loaded with dlopen (KILN_CUDA_CUBLASLT, else the CUDA 13 or 12
// libcublasLt). One handle per thread and device, as cuBLAS's; descriptors per call (host
// work only, and a CUDA graph replays the call without them). The heuristics are told each
// operand's real alignment (they assume 256 bytes otherwise, and an offset view, x[:, 1:], then
// gets a kernel that faults on a GPU); a call cuBLASLt refuses declines, and the caller runs the
// GEMM and a kernel instead.
#include <cublasLt.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "cuda/gemm_types_cuda.h"
#include "cuda/libraries.h"
#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda/library_cuda.h"
#include "runtime/cuda_internal.h"

namespace kiln::cuda {
namespace {

// Workspace a call may ask for (cuBLAS's default for Hopper), from the caching allocator.
constexpr size_t kMaxWorkspace = 32 << 20;

// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_CUBLASLT_FUNCTIONS(X)        \
  X(cublasLtCreate)                       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmul)
// clang-format on

struct CublasLt {
#define KILN_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_CUBLASLT_FUNCTIONS(KILN_DECLARE)
#undef KILN_DECLARE
  bool ok = false;
  std::string reason;
};

CublasLt load_cublaslt() {
  CublasLt c;
  void* lib = open_library("KILN_CUDA_CUBLASLT",
                           {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13", "libcublasLt.so.12",
                            "/usr/local/cuda/lib64/libcublasLt.so.12"},
                           "cuBLASLt", &c.reason);
  if (!lib) return c;
  std::string missing;
#define KILN_LOAD(fn)                                       \
  c.fn = reinterpret_cast<decltype(c.fn)>(dlsym(lib, #fn)); \
  if (!c.fn) missing += std::string(missing.empty() ? "" : ", ") + #fn;
  KILN_CUBLASLT_FUNCTIONS(KILN_LOAD)
#undef KILN_LOAD
  c.ok = missing.empty();
  if (!c.ok) c.reason = "cuBLASLt lacks " + missing;
  return c;
}

const CublasLt& lt() {
  static const CublasLt c = load_cublaslt();
  return c;
}

std::atomic<int64_t> g_fused{0}, g_declined{0};

void check_lt(cublasStatus_t s, const char* call) {
  KILN_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuda: {} failed with cuBLAS status {}", call, static_cast<int>(s));
}

cublasLtHandle_t cublaslt_handle(int device) {
  static auto* pool = new HandlePool<cublasLtHandle_t>([](int d) {
    cublasLtHandle_t h = nullptr;
    check_lt(retry_out_of_memory(
                 d, [&] { return lt().cublasLtCreate(&h); },
                 [](cublasStatus_t s) { return s == CUBLAS_STATUS_ALLOC_FAILED; }),
             "cublasLtCreate");
    return h;
  });
  return pool->get(device);
}

// The largest power of two, up to 256, that divides the address: what the heuristics may
// assume of an operand (cuBLASLt's CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES).
uint32_t alignment(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t k = 256;
  while (k > 1 && a % k != 0) k /= 2;
  return k;
}

cublasLtEpilogue_t epilogue_of(Epilogue e) {
  switch (e) {
    case Epilogue::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::GeluBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_BIAS;
  }
}

// The descriptors of one call, destroyed with it.
struct GemmDescriptors {
  const CublasLt& l;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~GemmDescriptors() {
    if (pref) l.cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t x : {a, b, c})
      if (x) l.cublasLtMatrixLayoutDestroy(x);
    if (op) l.cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

bool gemm_epilogue(int device, DType dtype, Epilogue epilogue, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                   int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, const void* bias, void* c,
                   int64_t ldc, std::string* why) {
  const CublasLt& l = lt();
  auto decline = [&](std::string reason) {
    *why = std::move(reason);
    g_declined.fetch_add(1, std::memory_order_relaxed);
    return false;
  };
  if (!l.ok) return decline(l.reason);
  bind(device, "addmm");
  GemmTypes t;
  if (!gemm_types(dtype, &t)) return decline(fmt::format("cuBLASLt takes float dtypes, not {}", dtype_name(dtype)));
  // On an H200 its GELU_BIAS epilogue in f64 was about 1e-10 relative off gelu_tanh (an f32-grade
  // tanh), where the GEMM and kiln's f64 kernel meet the double reference.
  if (epilogue == Epilogue::GeluBias && dtype == DType::F64)
    return decline("cuBLASLt's GELU epilogue is not f64-accurate (about 1e-10 relative on an H200)");
  GemmDescriptors d{l};
  cublasOperation_t ta = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t e = epilogue_of(epilogue);
  check_lt(l.cublasLtMatmulDescCreate(&d.op, t.compute, t.scale), "cublasLtMatmulDescCreate");
  check_lt(l.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
           "cublasLtMatmulDescSetAttribute");
  check_lt(l.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
           "cublasLtMatmulDescSetAttribute");
  check_lt(l.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e),
           "cublasLtMatmulDescSetAttribute");
  // Before the heuristic query: cuBLASLt reads the bias's alignment from this pointer (it has
  // no preference for it), so an offset bias view gets an algorithm that holds for it.
  check_lt(l.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
           "cublasLtMatmulDescSetAttribute");
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  check_lt(l.cublasLtMatrixLayoutCreate(&d.a, t.type, u(transpose_a ? k : m), u(transpose_a ? m : k), lda),
           "cublasLtMatrixLayoutCreate");
  check_lt(l.cublasLtMatrixLayoutCreate(&d.b, t.type, u(transpose_b ? n : k), u(transpose_b ? k : n), ldb),
           "cublasLtMatrixLayoutCreate");
  check_lt(l.cublasLtMatrixLayoutCreate(&d.c, t.type, u(m), u(n), ldc), "cublasLtMatrixLayoutCreate");
  check_lt(l.cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate");
  size_t max_workspace = kMaxWorkspace;
  check_lt(l.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                  sizeof max_workspace),
           "cublasLtMatmulPreferenceSetAttribute");
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c}};
  for (const auto& [attr, p] : aligned) {
    uint32_t bytes = alignment(p);
    check_lt(l.cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &bytes, sizeof bytes),
             "cublasLtMatmulPreferenceSetAttribute");
  }
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  cublasLtHandle_t h = cublaslt_handle(device);
  cublasStatus_t s = l.cublasLtMatmulAlgoGetHeuristic(h, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &best, &found);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0 || best.state != CUBLAS_STATUS_SUCCESS)
    return decline(fmt::format("cuBLASLt has no algorithm for this epilogue ({} {}x{}x{}, status {})",
                               dtype_name(dtype), m, n, k, static_cast<int>(s)));
  CachingAllocator& memory = device_allocator(device);
  void* workspace = best.workspaceSize ? memory.allocate(best.workspaceSize) : nullptr;
  s = l.cublasLtMatmul(h, d.op, t.alpha(), a, d.a, b, d.b, t.beta(), c, d.c, c, d.c, &best.algo, workspace,
                       best.workspaceSize, current(device));
  // Freed at once: the next use of the block on this stream comes after this GEMM.
  if (workspace) memory.deallocate(workspace, best.workspaceSize);
  if (s != CUBLAS_STATUS_SUCCESS)  // refused before it ran: the caller computes it another way
    return decline(fmt::format("cublasLtMatmul refused it ({} {}x{}x{}, status {})", dtype_name(dtype), m, n, k,
                               static_cast<int>(s)));
  g_fused.fetch_add(1, std::memory_order_relaxed);
  return true;
}

EpilogueStats epilogue_stats() {
  return {g_fused.load(std::memory_order_relaxed), g_declined.load(std::memory_order_relaxed)};
}

}  // namespace kiln::cuda
