// tests/cuda/host/dnn_cuda.cpp -- the host CUDA's cuDNN: the calls kiln makes (the legacy
// convolution API, with cudnn.h's types), computing on the host in double with reference loops
// on the handle's stream, in stream order. kiln loads it instead of libcudnn when
// KILN_CUDA_CUDNN names it.
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "tests/cuda/host/dnn_cuda.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

struct cudnnFilterStruct {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  int ph = 0, pw = 0, sh = 1, sw = 1, dh = 1, dw = 1, groups = 1;
};

namespace {

std::atomic<long long> g_queries{0};  // the convolution algorithm queries made (ranked or timed)
std::atomic<long long> g_timed{0};    // of which timed (cudnnFind*)

long long at(const cudnnTensorStruct& d, int n, int c, int y, int x) {
  return static_cast<long long>(n) * d.sn + static_cast<long long>(c) * d.sc + static_cast<long long>(y) * d.sh +
         static_cast<long long>(x) * d.sw;
}
long long at(const cudnnFilterStruct& f, int k, int c, int y, int x) {
  return ((static_cast<long long>(k) * f.c + c) * f.h + y) * f.w + x;
}

// Calls fn(n, o, oy, ox, ci, ky, kx, iy, ix) for every tap of the convolution that lands inside
// the input: the one loop nest the three directions share.
template <class F> void taps(const cudnnTensorStruct& x, const cudnnFilterStruct& w, const cudnnTensorStruct& y,
                             const cudnnConvolutionStruct& c, F fn) {
  int per_group_out = w.k / c.groups;
  for (int n = 0; n < y.n; ++n)
    for (int o = 0; o < y.c; ++o)
      for (int oy = 0; oy < y.h; ++oy)
        for (int ox = 0; ox < y.w; ++ox)
          for (int ci = 0; ci < w.c; ++ci)
            for (int ky = 0; ky < w.h; ++ky)
              for (int kx = 0; kx < w.w; ++kx) {
                int iy = oy * c.sh - c.ph + ky * c.dh, ix = ox * c.sw - c.pw + kx * c.dw;
                if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
                fn(n, o, oy, ox, o / per_group_out * w.c + ci, ky, kx, iy, ix, ci);
              }
}

bool packed(const cudnnTensorStruct& d) {
  return d.sw == 1 && d.sh == d.w && d.sc == d.h * d.w && d.sn == d.c * d.h * d.w;
}
cudnnStatus_t refused(const cudnnTensorStruct& a, const cudnnTensorStruct& b) {
  bool no =
      host_dnn::listed(host_dnn::type_name(a.type)) || (host_dnn::listed("strided") && (!packed(a) || !packed(b)));
  return no ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
}

// KILN_HOST_CUDNN_WORKSPACE_MB=n: the heuristics rank first another algorithm that asks for n MB
// of workspace (a GPU's cuDNN may ask for gigabytes): a caller must try the next when that does
// not fit. The call refuses that algorithm with less workspace than it asked for.
size_t big_workspace() {
  const char* env = std::getenv("KILN_HOST_CUDNN_WORKSPACE_MB");
  return env ? static_cast<size_t>(std::atoll(env)) << 20 : 0;
}
template <class Perf, class Algo> int rank(Perf* p, Algo big, Algo plain, cudnnStatus_t status) {
  int n = 0;
  if (size_t bytes = big_workspace()) {
    std::memset(&p[n], 0, sizeof p[n]);
    p[n].algo = big, p[n].status = status, p[n].memory = bytes;
    ++n;
  }
  std::memset(&p[n], 0, sizeof p[n]);
  p[n].algo = plain, p[n].status = status;
  return n + 1;
}
template <class Algo> bool short_workspace(Algo algo, Algo big, size_t bytes) {
  return big_workspace() && algo == big && bytes < big_workspace();
}

bool unit_scales(const void* alpha, const void* beta, cudnnDataType_t t) {
  double a = t == CUDNN_DATA_DOUBLE ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  double b = t == CUDNN_DATA_DOUBLE ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  return a == 1 && b == 0;
}

// Timed searches (cudnnFind*Ex): the same candidates, timed in stream order (the host runs none:
// the plain algorithm is reported fastest), those whose workspace exceeds the one given
// failing, as cuDNN's do. The output is not written (cuDNN's holds some candidate's result).
template <class Perf, class Algo> int timed(Perf* p, Algo big, Algo plain, cudnnStatus_t status, size_t given) {
  g_queries.fetch_add(1, std::memory_order_relaxed);
  g_timed.fetch_add(1, std::memory_order_relaxed);
  int n = rank(p, big, plain, status);
  if (n == 2) {
    std::swap(p[0], p[1]);
    p[0].time = 1, p[1].time = 2;
    if (p[1].memory > given) p[1].status = CUDNN_STATUS_ALLOC_FAILED;
  }
  return n;
}
}  // namespace

extern "C" {

const char* cudnnGetErrorString(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_BAD_PARAM";
}
// A handle takes device memory, as cuDNN's does.
cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  if (!kiln_host_reserve(4 << 20)) return CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  *h = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return host_dnn::create(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return host_dnn::destroy(d); }
// As cuDNN's, a tensor of 2^31 elements or more (it indexes with int) is refused; tests lower the
// limit with KILN_HOST_CUDNN_MAX_ELEMENTS to see kiln split a batch without 8 GiB tensors.
cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t d, cudnnDataType_t t, int n, int c, int h, int w,
                                           int sn, int sc, int sh, int sw) {
  const char* env = std::getenv("KILN_HOST_CUDNN_MAX_ELEMENTS");
  const long long limit = env && *env ? std::atoll(env) : (1ll << 31) - 1;
  long long extent = 1;  // one past the furthest element
  for (auto [size, stride] : {std::pair{n, sn}, std::pair{c, sc}, std::pair{h, sh}, std::pair{w, sw}})
    extent += (static_cast<long long>(size) - 1) * stride;
  if (static_cast<long long>(n) * c * h * w >= limit || extent > limit) return CUDNN_STATUS_BAD_PARAM;
  *d = {t, n, c, h, w, sn, sc, sh, sw};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return host_dnn::create(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return host_dnn::destroy(d); }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k,
                                         int c, int h, int w) {
  if (f != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;
  *d = {t, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) { return host_dnn::create(d); }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { return host_dnn::destroy(d); }
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v, int dh,
                                              int dw, cudnnConvolutionMode_t mode, cudnnDataType_t) {
  if (mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_NOT_SUPPORTED;
  d->ph = ph, d->pw = pw, d->sh = u, d->sw = v, d->dh = dh, d->dw = dw;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int g) {
  d->groups = g;
  return g >= 1 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t, cudnnMathType_t) {
  return CUDNN_STATUS_SUCCESS;
}

// The algorithm queries made (cuDNN's cost about a millisecond each; a timed one runs every
// candidate): tests read them through these.
long long kiln_host_cudnn_algorithm_queries() { return g_queries.load(std::memory_order_relaxed); }
long long kiln_host_cudnn_timed_queries() { return g_timed.load(std::memory_order_relaxed); }

size_t cudnnGetVersion() { return 90000; }

// One algorithm, no workspace (two with KILN_HOST_CUDNN_WORKSPACE_MB).
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t,
                                                     cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t y, int,
                                                     int* n, cudnnConvolutionFwdAlgoPerf_t* p) {
  g_queries.fetch_add(1, std::memory_order_relaxed);
  *n = rank(p, CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, refused(*x, *y));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, cudnnFilterDescriptor_t,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t,
                                                          cudnnTensorDescriptor_t dx, int, int* n,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* p) {
  g_queries.fetch_add(1, std::memory_order_relaxed);
  *n = rank(p, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, refused(*dx, *dy));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, cudnnTensorDescriptor_t x,
                                                            cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t,
                                                            cudnnFilterDescriptor_t, int, int* n,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* p) {
  g_queries.fetch_add(1, std::memory_order_relaxed);
  *n = rank(p, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, refused(*x, *dy));
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t, cudnnTensorDescriptor_t x, const void*,
                                                     cudnnFilterDescriptor_t, const void*, cudnnConvolutionDescriptor_t,
                                                     cudnnTensorDescriptor_t y, void*, int, int* n,
                                                     cudnnConvolutionFwdAlgoPerf_t* p, void*, size_t given) {
  *n = timed(p, CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, refused(*x, *y), given);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t, cudnnFilterDescriptor_t, const void*,
                                                          cudnnTensorDescriptor_t dy, const void*,
                                                          cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t dx,
                                                          void*, int, int* n, cudnnConvolutionBwdDataAlgoPerf_t* p,
                                                          void*, size_t given) {
  *n = timed(p, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, refused(*dx, *dy), given);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t, cudnnTensorDescriptor_t x, const void*,
                                                            cudnnTensorDescriptor_t dy, const void*,
                                                            cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t,
                                                            void*, int, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* p,
                                                            void*, size_t given) {
  *n = timed(p, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, refused(*x, *dy), given);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
                                                      cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t,
                                                      cudnnConvolutionFwdAlgo_t, size_t* s) {
  *s = 0;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, cudnnFilterDescriptor_t,
                                                           cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,
                                                           cudnnTensorDescriptor_t, cudnnConvolutionBwdDataAlgo_t,
                                                           size_t* s) {
  *s = 0;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, cudnnTensorDescriptor_t,
                                                             cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,
                                                             cudnnFilterDescriptor_t, cudnnConvolutionBwdFilterAlgo_t,
                                                             size_t* s) {
  *s = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, cudnnTensorDescriptor_t xd, const void* x,
                                      cudnnFilterDescriptor_t wd, const void* w, cudnnConvolutionDescriptor_t cd,
                                      cudnnConvolutionFwdAlgo_t algo, void*, size_t bytes, const void* beta,
                                      cudnnTensorDescriptor_t yd, void* y) {
  if (!unit_scales(alpha, beta, xd->type)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (short_workspace(algo, CUDNN_CONVOLUTION_FWD_ALGO_FFT, bytes)) return CUDNN_STATUS_BAD_PARAM;
  cudnnTensorStruct X = *xd, Y = *yd;
  cudnnFilterStruct W = *wd;
  cudnnConvolutionStruct C = *cd;
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(h->stream),
      [=] {
        std::vector<double> acc(static_cast<size_t>(Y.n) * Y.c * Y.h * Y.w, 0.0);
        taps(X, W, Y, C, [&](int n, int o, int oy, int ox, int c, int ky, int kx, int iy, int ix, int ci) {
          acc[((static_cast<size_t>(n) * Y.c + o) * Y.h + oy) * Y.w + ox] +=
              host_dnn::load(x, X.type, at(X, n, c, iy, ix)) * host_dnn::load(w, W.type, at(W, o, ci, ky, kx));
        });
        for (int n = 0; n < Y.n; ++n)
          for (int o = 0; o < Y.c; ++o)
            for (int oy = 0; oy < Y.h; ++oy)
              for (int ox = 0; ox < Y.w; ++ox)
                host_dnn::store(y, Y.type, at(Y, n, o, oy, ox),
                                acc[((static_cast<size_t>(n) * Y.c + o) * Y.h + oy) * Y.w + ox]);
      },
      "host_cudnn_convolution_forward");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha, cudnnFilterDescriptor_t wd,
                                           const void* w, cudnnTensorDescriptor_t dyd, const void* dy,
                                           cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo, void*,
                                           size_t bytes, const void* beta, cudnnTensorDescriptor_t dxd, void* dx) {
  if (!unit_scales(alpha, beta, wd->type)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (short_workspace(algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, bytes)) return CUDNN_STATUS_BAD_PARAM;
  cudnnTensorStruct X = *dxd, Y = *dyd;
  cudnnFilterStruct W = *wd;
  cudnnConvolutionStruct C = *cd;
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(h->stream),
      [=] {
        std::vector<double> acc(static_cast<size_t>(X.n) * X.c * X.h * X.w, 0.0);
        taps(X, W, Y, C, [&](int n, int o, int oy, int ox, int c, int ky, int kx, int iy, int ix, int ci) {
          acc[((static_cast<size_t>(n) * X.c + c) * X.h + iy) * X.w + ix] +=
              host_dnn::load(dy, Y.type, at(Y, n, o, oy, ox)) * host_dnn::load(w, W.type, at(W, o, ci, ky, kx));
        });
        for (int n = 0; n < X.n; ++n)
          for (int c = 0; c < X.c; ++c)
            for (int iy = 0; iy < X.h; ++iy)
              for (int ix = 0; ix < X.w; ++ix)
                host_dnn::store(dx, X.type, at(X, n, c, iy, ix),
                                acc[((static_cast<size_t>(n) * X.c + c) * X.h + iy) * X.w + ix]);
      },
      "host_cudnn_convolution_backward_data");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha, cudnnTensorDescriptor_t xd,
                                             const void* x, cudnnTensorDescriptor_t dyd, const void* dy,
                                             cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t algo,
                                             void*, size_t bytes, const void* beta, cudnnFilterDescriptor_t dwd,
                                             void* dw) {
  if (!unit_scales(alpha, beta, xd->type)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (short_workspace(algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, bytes)) return CUDNN_STATUS_BAD_PARAM;
  cudnnTensorStruct X = *xd, Y = *dyd;
  cudnnFilterStruct W = *dwd;
  cudnnConvolutionStruct C = *cd;
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(h->stream),
      [=] {
        std::vector<double> acc(static_cast<size_t>(W.k) * W.c * W.h * W.w, 0.0);
        taps(X, W, Y, C, [&](int n, int o, int oy, int ox, int c, int ky, int kx, int iy, int ix, int ci) {
          acc[static_cast<size_t>(at(W, o, ci, ky, kx))] +=
              host_dnn::load(x, X.type, at(X, n, c, iy, ix)) * host_dnn::load(dy, Y.type, at(Y, n, o, oy, ox));
        });
        for (size_t i = 0; i < acc.size(); ++i) host_dnn::store(dw, W.type, static_cast<long long>(i), acc[i]);
      },
      "host_cudnn_convolution_backward_filter");
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
