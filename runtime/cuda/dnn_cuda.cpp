// runtime/cuda/dnn_cuda.cpp -- conv2d and its two gradients on CUDA through cuDNN 9, loaded with
// dlopen (KILN_CUDA_CUDNN, else libcudnn.so.9 on the library path or in /usr/local/cuda). Its
// legacy convolution calls (cudnnConvolutionForward, ...BackwardData, ...BackwardFilter), which
// cuDNN 9 keeps (marked deprecated in favour of its graph API, whose descriptors would add
// nothing for these three ops): NCHW, any input strides, groups, dilation; the first algorithm
// cuDNN's heuristics rank whose workspace the caching allocator can give. A configuration cuDNN
// does not support is a kiln::Error naming it, never a wrong answer. Installed into the CUDA
// op table by the runtime itself.
#include <cudnn.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/library_cuda.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda_kernels.h"

// cuDNN 9 marks the legacy convolution API deprecated; kiln calls it on purpose (see above).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace kiln::cuda {
namespace {

#define KILN_CUDNN_FUNCTIONS(X)                                                                               \
  X(cudnnCreate) X(cudnnSetStream) X(cudnnGetErrorString) X(cudnnCreateTensorDescriptor)                      \
  X(cudnnSetTensor4dDescriptorEx) X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor)             \
  X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnCreateConvolutionDescriptor)          \
  X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)         \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolutionForwardAlgorithm_v7)                             \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnConvolutionForward)                                       \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnGetConvolutionBackwardDataWorkspaceSize)             \
  X(cudnnConvolutionBackwardData) X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                           \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) X(cudnnConvolutionBackwardFilter)

struct Cudnn {
#define KILN_CUDNN_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_DECLARE)
#undef KILN_CUDNN_DECLARE
  bool ok = false;
  std::string reason;
};

Cudnn load() {
  Cudnn c;
  void* lib = open_library("KILN_CUDA_CUDNN", {"libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9"}, "cuDNN 9",
                           &c.reason);
  if (!lib) return c;
  std::string missing;
#define KILN_CUDNN_LOAD(fn)                                        \
  c.fn = reinterpret_cast<decltype(c.fn)>(dlsym(lib, #fn));        \
  if (!c.fn) missing += std::string(missing.empty() ? "" : ", ") + #fn;
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_LOAD)
#undef KILN_CUDNN_LOAD
  c.ok = missing.empty();
  if (!c.ok) c.reason = "cuDNN lacks " + missing;
  return c;
}

const Cudnn& cudnn() {
  static const Cudnn c = load();
  return c;
}

void check_dnn(cudnnStatus_t s, const char* call, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  throw Error(fmt::format("{}: cuDNN's {} failed: {} ({})", what, call, cudnn().cudnnGetErrorString(s),
                          s == CUDNN_STATUS_NOT_SUPPORTED ? "a configuration cuDNN does not support" : "an error"));
}

cudnnHandle_t handle(int device) {
  thread_local std::map<int, cudnnHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  check_dnn(cudnn().cudnnCreate(&h), "cudnnCreate", "conv2d");
  static std::mutex mu;  // kept for the process, reachable after its thread ends (as cuBLAS's)
  static auto* all = new std::vector<cudnnHandle_t>;
  {
    std::lock_guard<std::mutex> lock(mu);
    all->push_back(h);
  }
  return handles[device] = h;
}

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: throw Error(fmt::format("conv2d: cuDNN takes float dtypes, not {}", dtype_name(t)));
  }
}

int fits(int64_t v, const char* op) {
  KILN_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "{}: size {} is beyond what cuDNN takes", op, v);
  return static_cast<int>(v);
}

// The descriptors of one convolution, destroyed with it.
struct Conv {
  const Cudnn& d = cudnn();
  std::string op;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  // x and y: [N,C,H,W] tensors (any strides); w: the weight's shape (contiguous).
  Conv(const char* name, const Tensor& xt, const Dims& w_shape, const Tensor& yt, const Attrs& a) : op(name) {
    KILN_CHECK(d.ok, "{}: cuDNN is not available: {}", op, d.reason);
    cudnnDataType_t t = data_type(xt.dtype());
    check_dnn(d.cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor", op);
    check_dnn(d.cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor", op);
    check_dnn(d.cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor", op);
    check_dnn(d.cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor", op);
    for (auto [desc, t4] : {std::pair{x, &xt}, std::pair{y, &yt}}) {
      const Dims &s = t4->shape(), &st = t4->strides();
      check_dnn(d.cudnnSetTensor4dDescriptorEx(desc, t, fits(s[0], name), fits(s[1], name), fits(s[2], name),
                                               fits(s[3], name), fits(std::max<int64_t>(st[0], 1), name),
                                               fits(std::max<int64_t>(st[1], 1), name),
                                               fits(std::max<int64_t>(st[2], 1), name),
                                               fits(std::max<int64_t>(st[3], 1), name)),
                "cudnnSetTensor4dDescriptorEx", op);
    }
    check_dnn(d.cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, fits(w_shape[0], name), fits(w_shape[1], name),
                                           fits(w_shape[2], name), fits(w_shape[3], name)),
              "cudnnSetFilter4dDescriptor", op);
    cudnnDataType_t compute = xt.dtype() == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    check_dnn(d.cudnnSetConvolution2dDescriptor(conv, fits(a.padding[0], name), fits(a.padding[1], name),
                                                fits(a.stride[0], name), fits(a.stride[1], name),
                                                fits(a.dilation[0], name), fits(a.dilation[1], name),
                                                CUDNN_CROSS_CORRELATION, compute),
              "cudnnSetConvolution2dDescriptor", op);
    check_dnn(d.cudnnSetConvolutionGroupCount(conv, fits(a.groups, name)), "cudnnSetConvolutionGroupCount", op);
    cudnnMathType_t math = xt.dtype() == DType::F32 ? (allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)
                                                    : CUDNN_TENSOR_OP_MATH;
    if (xt.dtype() == DType::F64) math = CUDNN_DEFAULT_MATH;
    check_dnn(d.cudnnSetConvolutionMathType(conv, math), "cudnnSetConvolutionMathType", op);
  }
  ~Conv() {
    if (x) d.cudnnDestroyTensorDescriptor(x);
    if (y) d.cudnnDestroyTensorDescriptor(y);
    if (w) d.cudnnDestroyFilterDescriptor(w);
    if (conv) d.cudnnDestroyConvolutionDescriptor(conv);
  }
  Conv(const Conv&) = delete;
  Conv& operator=(const Conv&) = delete;
};

// Workspace from the device's caching allocator, held for the call (freed in stream order).
struct Workspace {
  Tensor t;
  void* ptr = nullptr;
  Workspace(size_t bytes, Device device) {
    if (bytes == 0) return;
    t = Tensor::empty({DType::U8, {static_cast<int64_t>(bytes)}, device});
    ptr = t.data_ptr();
  }
};

// The first ranked algorithm that cuDNN says works: `perf` as the heuristics gave it.
template <class Perf>
Perf pick(const std::vector<Perf>& perf, int count, const std::string& op) {
  for (int i = 0; i < count; ++i)
    if (perf[static_cast<size_t>(i)].status == CUDNN_STATUS_SUCCESS) return perf[static_cast<size_t>(i)];
  throw Error(fmt::format("{}: cuDNN has no algorithm for this configuration (a configuration cuDNN does not "
                          "support)",
                          op));
}

void prepare(int device) {
  bind(device, "conv2d");
  check_dnn(cudnn().cudnnSetStream(handle(device), reinterpret_cast<cudaStream_t>(current(device))), "cudnnSetStream",
            "conv2d");
}

void conv2d_forward(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& x = in[0];
  Tensor w = in[1].contiguous();
  int device = out.device().index;
  Conv c("conv2d", x, w.shape(), out, a);
  prepare(device);
  cudnnHandle_t h = handle(device);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  int n = 0;
  check_dnn(c.d.cudnnGetConvolutionForwardAlgorithm_v7(h, c.x, c.w, c.conv, c.y, static_cast<int>(perf.size()), &n,
                                                       perf.data()),
            "cudnnGetConvolutionForwardAlgorithm_v7", c.op);
  auto algo = pick(perf, n, c.op);
  Workspace ws(algo.memory, out.device());
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = x.dtype() == DType::F64;
  check_dnn(c.d.cudnnConvolutionForward(h, f64 ? (void*)&one64 : (void*)&one32, c.x, x.data_ptr(), c.w,
                                        w.data_ptr(), c.conv, algo.algo, ws.ptr, algo.memory,
                                        f64 ? (void*)&zero64 : (void*)&zero32, c.y, out.data_ptr()),
            "cudnnConvolutionForward", c.op);
}

// conv2d_input_grad(g, w): the gradient of conv2d's input, of attrs.shape.
void conv2d_input_grad(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& g = in[0];
  Tensor w = in[1].contiguous();
  int device = out.device().index;
  Conv c("conv2d_input_grad", out, w.shape(), g, a);
  prepare(device);
  cudnnHandle_t h = handle(device);
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  int n = 0;
  check_dnn(c.d.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w, c.y, c.conv, c.x, static_cast<int>(perf.size()),
                                                            &n, perf.data()),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7", c.op);
  auto algo = pick(perf, n, c.op);
  Workspace ws(algo.memory, out.device());
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = g.dtype() == DType::F64;
  check_dnn(c.d.cudnnConvolutionBackwardData(h, f64 ? (void*)&one64 : (void*)&one32, c.w, w.data_ptr(), c.y,
                                             g.data_ptr(), c.conv, algo.algo, ws.ptr, algo.memory,
                                             f64 ? (void*)&zero64 : (void*)&zero32, c.x, out.data_ptr()),
            "cudnnConvolutionBackwardData", c.op);
}

// conv2d_weight_grad(x, g): the gradient of conv2d's weight, of attrs.shape (contiguous).
void conv2d_weight_grad(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor &x = in[0], &g = in[1];
  int device = out.device().index;
  Conv c("conv2d_weight_grad", x, out.shape(), g, a);
  prepare(device);
  cudnnHandle_t h = handle(device);
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  int n = 0;
  check_dnn(c.d.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x, c.y, c.conv, c.w, static_cast<int>(perf.size()),
                                                              &n, perf.data()),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7", c.op);
  auto algo = pick(perf, n, c.op);
  Workspace ws(algo.memory, out.device());
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = x.dtype() == DType::F64;
  check_dnn(c.d.cudnnConvolutionBackwardFilter(h, f64 ? (void*)&one64 : (void*)&one32, c.x, x.data_ptr(), c.y,
                                               g.data_ptr(), c.conv, algo.algo, ws.ptr, algo.memory,
                                               f64 ? (void*)&zero64 : (void*)&zero32, c.w, out.data_ptr()),
            "cudnnConvolutionBackwardFilter", c.op);
}

const bool g_installed = [] {
  set_op_kernel(OpId::Conv2d, conv2d_forward);
  set_op_kernel(OpId::Conv2dInputGrad, conv2d_input_grad);
  set_op_kernel(OpId::Conv2dWeightGrad, conv2d_weight_grad);
  return true;
}();

}  // namespace
}  // namespace kiln::cuda
