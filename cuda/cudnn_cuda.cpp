// cuda/cudnn_cuda.cpp -- loading cuDNN 9 and what its callers share (cudnn_cuda.h).
#include "cuda/cudnn_cuda.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda/library_cuda.h"

namespace kiln::cuda {
namespace {

// Loads one group of symbols; "" when all were there, else their names.
template <class Load> std::string load_group(Load load) {
  std::string missing;
  load([&](const char* name, bool found) {
    if (!found) missing += std::string(missing.empty() ? "" : ", ") + name;
  });
  return missing;
}

Cudnn load_cudnn() {
  Cudnn c;
  void* lib =
      open_library("KILN_CUDA_CUDNN", {"libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9"}, "cuDNN 9", &c.reason);
  if (!lib) {
    c.rnn_reason = c.reason;
    return c;
  }
#define KILN_CUDNN_LOAD(fn)                                 \
  c.fn = reinterpret_cast<decltype(c.fn)>(dlsym(lib, #fn)); \
  note(#fn, c.fn != nullptr);
  std::string core = load_group([&](auto note) { KILN_CUDNN_CORE_FUNCTIONS(KILN_CUDNN_LOAD) });
  std::string rnn = load_group([&](auto note) { KILN_CUDNN_RNN_FUNCTIONS(KILN_CUDNN_LOAD) });
#undef KILN_CUDNN_LOAD
  c.ok = core.empty();
  if (!c.ok) c.reason = "cuDNN lacks " + core;
  c.rnn_ok = c.ok && rnn.empty();
  if (!c.ok) c.rnn_reason = c.reason;
  else if (!rnn.empty()) c.rnn_reason = "cuDNN lacks " + rnn;
  return c;
}

}  // namespace

const Cudnn& cudnn() {
  static const Cudnn c = load_cudnn();
  return c;
}

void check_dnn(cudnnStatus_t s, const char* call, const std::string& op) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  throw Error(fmt::format("{}: cuDNN's {} failed: {} ({})", op, call, cudnn().cudnnGetErrorString(s),
                          s == CUDNN_STATUS_NOT_SUPPORTED ? "a configuration cuDNN does not support" : "an error"));
}

cudnnHandle_t dnn_handle(int device, const std::string& op) {
  bind(device, op.c_str());
  // Pooled (handles_cuda.h); cudnnCreate's device memory is taken outside the cache.
  static auto* pool = new HandlePool<cudnnHandle_t>([](int d) {
    cudnnHandle_t h = nullptr;
    check_dnn(retry_out_of_memory(
                  d, [&] { return cudnn().cudnnCreate(&h); },
                  [](cudnnStatus_t s) { return s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED; }),
              "cudnnCreate", "cudnn");
    return h;
  });
  cudnnHandle_t h = pool->get(device);
  check_dnn(cudnn().cudnnSetStream(h, reinterpret_cast<cudaStream_t>(current(device))), "cudnnSetStream", op);
  return h;
}

cudnnDataType_t dnn_data_type(DType t, const std::string& op) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: throw Error(fmt::format("{}: cuDNN takes float dtypes, not {}", op, dtype_name(t)));
  }
}

int fits_dnn(int64_t v, const std::string& op) {
  KILN_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "{}: size {} is beyond what cuDNN takes", op, v);
  return static_cast<int>(v);
}

}  // namespace kiln::cuda
