// tests/cuda/host/dnn_cuda.h -- what the host cuDNN's files share (dnn_cuda.cpp: convolutions;
// rnn_cuda.cpp: recurrent networks): the handle and tensor descriptors, element access in
// double, and the refusals KILN_HOST_CUDNN_REFUSE asks for.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/half.h"
#include "tests/cuda/host/queue_cuda.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0, sn = 0, sc = 0, sh = 0, sw = 0;
  int dims = 4;  // 3 for an Nd descriptor of [n, c, h] (w = 1)
};

namespace host_dnn {

// A descriptor's create and destroy calls.
template <class T> cudnnStatus_t create(T** d) {
  *d = new T;
  return CUDNN_STATUS_SUCCESS;
}
template <class T> cudnnStatus_t destroy(T* d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

inline double load(const void* p, cudnnDataType_t t, long long i) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return static_cast<const float*>(p)[i];
    case CUDNN_DATA_DOUBLE: return static_cast<const double*>(p)[i];
    case CUDNN_DATA_HALF: return kiln::Half::to_float(static_cast<const uint16_t*>(p)[i]);
    case CUDNN_DATA_BFLOAT16: return kiln::BFloat16::to_float(static_cast<const uint16_t*>(p)[i]);
    default: return 0;
  }
}
inline void store(void* p, cudnnDataType_t t, long long i, double v) {
  switch (t) {
    case CUDNN_DATA_FLOAT: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case CUDNN_DATA_DOUBLE: static_cast<double*>(p)[i] = v; break;
    case CUDNN_DATA_HALF: static_cast<uint16_t*>(p)[i] = kiln::Half::from_float(static_cast<float>(v)); break;
    case CUDNN_DATA_BFLOAT16: static_cast<uint16_t*>(p)[i] = kiln::BFloat16::from_float(static_cast<float>(v)); break;
    default: break;
  }
}

// KILN_HOST_CUDNN_REFUSE (a comma list of f32, f64, f16, bf16, "strided" and "rnn") makes the
// heuristics rank only an algorithm that does not work for those dtypes, or for tensors that
// are not packed NCHW, and the RNN descriptor refuse those dtypes or every network, as the real
// cuDNN does for some configurations: kiln's fallbacks then run in CI.
inline const char* type_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_DOUBLE: return "f64";
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    default: return "?";
  }
}
inline bool listed(const char* word) {
  const char* env = std::getenv("KILN_HOST_CUDNN_REFUSE");
  if (!env) return false;
  std::string list = std::string(",") + env + ",";
  return list.find(std::string(",") + word + ",") != std::string::npos;
}

}  // namespace host_dnn
