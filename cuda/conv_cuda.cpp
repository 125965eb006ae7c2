// cuda/conv_cuda.cpp -- conv2d and its two gradients on CUDA through cuDNN 9
// (cudnn_cuda.h). Its legacy convolution calls (cudnnConvolutionForward, ...BackwardData, ...BackwardFilter), which
// cuDNN 9 keeps (marked deprecated in favour of its graph API, whose descriptors would add
// nothing for these three ops): NCHW, any input strides, groups, dilation; the first algorithm
// cuDNN's heuristics rank as working, its workspace from the caching allocator. Where cuDNN has
// none, contiguous operands and then wider dtypes are tried (convolve); a configuration that
// not even f64 supports is a kiln::Error naming it, never a wrong answer. Their kernels are in
// cuda/op_table.cpp's table.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "cuda/cudnn_cuda.h"
#include "cuda/libraries.h"
#include "cuda/op_kernels.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/log.h"

// cuDNN 9 marks the legacy convolution API deprecated; kiln calls it on purpose (see above).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace kiln::cuda {
namespace {

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
    cudnnDataType_t t = dnn_data_type(xt.dtype(), op);
    check_dnn(d.cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor", op);
    check_dnn(d.cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor", op);
    check_dnn(d.cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor", op);
    check_dnn(d.cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor", op);
    for (auto [desc, t4] : {std::pair{x, &xt}, std::pair{y, &yt}}) {
      const Dims &s = t4->shape(), &st = t4->strides();
      check_dnn(d.cudnnSetTensor4dDescriptorEx(
                    desc, t, fits_dnn(s[0], name), fits_dnn(s[1], name), fits_dnn(s[2], name), fits_dnn(s[3], name),
                    fits_dnn(std::max<int64_t>(st[0], 1), name), fits_dnn(std::max<int64_t>(st[1], 1), name),
                    fits_dnn(std::max<int64_t>(st[2], 1), name), fits_dnn(std::max<int64_t>(st[3], 1), name)),
                "cudnnSetTensor4dDescriptorEx", op);
    }
    check_dnn(
        d.cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, fits_dnn(w_shape[0], name), fits_dnn(w_shape[1], name),
                                     fits_dnn(w_shape[2], name), fits_dnn(w_shape[3], name)),
        "cudnnSetFilter4dDescriptor", op);
    cudnnDataType_t compute = xt.dtype() == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    check_dnn(d.cudnnSetConvolution2dDescriptor(conv, fits_dnn(a.padding[0], name), fits_dnn(a.padding[1], name),
                                                fits_dnn(a.stride[0], name), fits_dnn(a.stride[1], name),
                                                fits_dnn(a.dilation[0], name), fits_dnn(a.dilation[1], name),
                                                CUDNN_CROSS_CORRELATION, compute),
              "cudnnSetConvolution2dDescriptor", op);
    check_dnn(d.cudnnSetConvolutionGroupCount(conv, fits_dnn(a.groups, name)), "cudnnSetConvolutionGroupCount", op);
    cudnnMathType_t math =
        xt.dtype() == DType::F32 ? (allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH) : CUDNN_TENSOR_OP_MATH;
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

// Which of a convolution's three tensors (cuDNN's x, w, y) a call writes: conv2d writes y from x
// and w, its input gradient x from y's gradient and w, its weight gradient w from x and y's.
enum class Pass { Forward, InputGrad, WeightGrad };
size_t written(Pass p) { return p == Pass::Forward ? 2 : p == Pass::InputGrad ? 0 : 1; }

// Ranks `Perf`'s algorithms with `get` and runs, through `call`, the first that works and whose
// workspace fits in memory (an algorithm may ask for gigabytes: the next one is tried, as the
// next is when cuDNN says one does not support the configuration). False when none ran; an
// out-of-memory error when only memory stopped them.
template <class Perf, class Get, class Call> bool rank_and_run(int algo_count, Get get, Call call,
                                                               const std::string& op, const char* get_name,
                                                               const char* call_name, Device device) {
  std::vector<Perf> perf(static_cast<size_t>(algo_count));
  int n = 0;
  cudnnStatus_t s = get(algo_count, &n, perf.data());
  if (s == CUDNN_STATUS_NOT_SUPPORTED) return false;
  check_dnn(s, get_name, op);
  std::optional<OutOfMemory> no_room;
  for (int i = 0; i < n; ++i) {
    const Perf& algo = perf[static_cast<size_t>(i)];
    if (algo.status != CUDNN_STATUS_SUCCESS) continue;
    std::optional<Workspace> ws;
    try {
      ws.emplace(algo.memory, device);
    } catch (const OutOfMemory& e) {
      log(LogTopic::Cuda, fmt::format("{}: cuDNN algorithm {} skipped, its {} B of workspace do not fit", op,
                                      static_cast<int>(algo.algo), algo.memory));
      no_room = e;
      continue;
    }
    s = call(algo.algo, ws->ptr, algo.memory);
    if (s == CUDNN_STATUS_NOT_SUPPORTED) continue;
    check_dnn(s, call_name, op);
    log(LogTopic::Cuda,
        fmt::format("{}: cuDNN algorithm {}, {} B of workspace", op, static_cast<int>(algo.algo), algo.memory));
    return true;
  }
  if (no_room) throw *no_room;
  return false;
}

// One try at `p` over t = {x, w, y} as they are laid out; false when cuDNN has no algorithm.
bool attempt(Pass p, const std::string& op, const std::array<Tensor, 3>& t, const Attrs& a) {
  const Tensor &x = t[0], &w = t[1], &y = t[2];
  Device device = t[written(p)].device();
  Conv c(op.c_str(), x, w.shape(), y, a);
  cudnnHandle_t h = dnn_handle(device.index, op);
  const Cudnn& d = c.d;
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = x.dtype() == DType::F64;
  const void* one = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = f64 ? static_cast<const void*>(&zero64) : &zero32;
  switch (p) {
    case Pass::Forward:
      return rank_and_run<cudnnConvolutionFwdAlgoPerf_t>(
          CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
          [&](int m, int* n, cudnnConvolutionFwdAlgoPerf_t* perf) {
            return d.cudnnGetConvolutionForwardAlgorithm_v7(h, c.x, c.w, c.conv, c.y, m, n, perf);
          },
          [&](cudnnConvolutionFwdAlgo_t algo, void* ws, size_t bytes) {
            return d.cudnnConvolutionForward(h, one, c.x, x.data_ptr(), c.w, w.data_ptr(), c.conv, algo, ws, bytes,
                                             zero, c.y, y.data_ptr());
          },
          op, "cudnnGetConvolutionForwardAlgorithm_v7", "cudnnConvolutionForward", device);
    case Pass::InputGrad:
      return rank_and_run<cudnnConvolutionBwdDataAlgoPerf_t>(
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
          [&](int m, int* n, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
            return d.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w, c.y, c.conv, c.x, m, n, perf);
          },
          [&](cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t bytes) {
            return d.cudnnConvolutionBackwardData(h, one, c.w, w.data_ptr(), c.y, y.data_ptr(), c.conv, algo, ws, bytes,
                                                  zero, c.x, x.data_ptr());
          },
          op, "cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnConvolutionBackwardData", device);
    case Pass::WeightGrad:
      return rank_and_run<cudnnConvolutionBwdFilterAlgoPerf_t>(
          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
          [&](int m, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
            return d.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x, c.y, c.conv, c.w, m, n, perf);
          },
          [&](cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t bytes) {
            return d.cudnnConvolutionBackwardFilter(h, one, c.x, x.data_ptr(), c.y, y.data_ptr(), c.conv, algo, ws,
                                                    bytes, zero, c.w, w.data_ptr());
          },
          op, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnConvolutionBackwardFilter", device);
  }
  return false;
}

// Strides cuDNN's descriptors can say: positive wherever a dim has more than one element.
bool describable(const Tensor& t) {
  for (int i = 0; i < t.dim(); ++i)
    if (t.shape()[static_cast<size_t>(i)] > 1 && t.strides()[static_cast<size_t>(i)] <= 0) return false;
  return true;
}

// Runs `p` writing t[written(p)] (the op's output; the filter operand must be contiguous). cuDNN
// has no algorithm for some layouts and dtypes (on an H200, for both gradients of a grouped,
// dilated convolution with a channels-last operand), so on "none" it tries again with
// contiguous operands, then in wider dtypes (f16/bf16 in f32, then f32 in f64: exact for the
// inputs, one rounding of the result), as KILN_LOG=cuda says. Only when f64 has no algorithm either is it an error.
void convolve(Pass p, const char* op, std::array<Tensor, 3> t, const Attrs& a);

// x and y (t[0], t[2]) in batch chunks below cuDNN's element limit: each chunk's x and y are
// views, so the forward and input gradient write their part in place; the weight gradient sums
// the chunks' (cuDNN would overwrite). False when the tensors fit whole.
bool convolve_in_chunks(Pass p, const char* op, std::array<Tensor, 3> t, const Attrs& a) {
  const int64_t limit = dnn_element_limit();
  const Tensor &x = t[0], &y = t[2];
  const int64_t n = x.shape()[0], chunk = dnn_batch_chunk({{x.shape(), x.strides()}, {y.shape(), y.strides()}}, limit);
  if (chunk >= n) return false;
  KILN_CHECK(chunk > 0, "{}: one sample of {} -> {} has {} elements or more, and cuDNN indexes with int", op,
             shape_str(x.shape()), shape_str(y.shape()), limit);
  log(LogTopic::Cuda, fmt::format("{}: {} -> {} in batch chunks of {} (cuDNN takes fewer than {} elements)", op,
                                  shape_str(x.shape()), shape_str(y.shape()), chunk, limit));
  Tensor sum;
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t c = std::min(chunk, n - b);
    std::array<Tensor, 3> part = {x.narrow(0, b, c), t[1], y.narrow(0, b, c)};
    if (p == Pass::WeightGrad) part[1] = Tensor::empty(t[1].type());
    convolve(p, op, part, a);
    if (p == Pass::WeightGrad) sum = sum.defined() ? add(sum, part[1]) : part[1];
  }
  if (p == Pass::WeightGrad) t[1].copy_(sum);
  return true;
}

void convolve(Pass p, const char* op, std::array<Tensor, 3> t, const Attrs& a) {
  if (convolve_in_chunks(p, op, t, a)) return;
  const size_t out = written(p);
  Tensor result = t[out];
  bool layout_ok = std::all_of(t.begin(), t.end(), describable);
  if (layout_ok && attempt(p, op, t, a)) return;
  DType wide = result.dtype();
  std::string tried = layout_ok ? fmt::format("{} as laid out", dtype_name(wide)) : "";
  for (;;) {
    std::array<Tensor, 3> packed;
    for (size_t i = 0; i < 3; ++i)
      packed[i] = i == out ? Tensor::empty({wide, result.shape(), result.device()}) : t[i].to(wide).contiguous();
    if (!tried.empty())
      log(LogTopic::Cuda,
          fmt::format("{}: no cuDNN algorithm for {}; trying contiguous {}", op, tried, dtype_name(wide)));
    tried = fmt::format("contiguous {}", dtype_name(wide));
    if (attempt(p, op, packed, a)) {
      result.copy_(packed[out]);
      return;
    }
    if (wide == DType::F64) break;
    wide = wide == DType::F32 ? DType::F64 : DType::F32;
  }
  throw Error(fmt::format(
      "{}: cuDNN has no algorithm for {} x {} -> {} in {} (stride {}, padding {}, dilation {}, "
      "groups {}), not even contiguous in f64",
      op, shape_str(t[0].shape()), shape_str(t[1].shape()), shape_str(t[2].shape()), dtype_name(result.dtype()),
      shape_str(a.stride), shape_str(a.padding), shape_str(a.dilation), a.groups));
}

std::atomic<int64_t> g_dnn_limit{0};

}  // namespace

int64_t dnn_element_limit() {
  const int64_t l = g_dnn_limit.load(std::memory_order_relaxed);
  return l > 0 ? l : (int64_t{1} << 31) - 1;
}
void set_dnn_element_limit(int64_t limit) { g_dnn_limit.store(limit, std::memory_order_relaxed); }

int64_t dnn_batch_chunk(const std::vector<std::pair<Dims, Dims>>& tensors, int64_t limit) {
  int64_t best = std::numeric_limits<int64_t>::max();
  for (const auto& [shape, strides] : tensors) {
    if (shape.empty() || shape[0] == 0) continue;
    int64_t sample = 1, extent = 1;  // a sample's elements, and one past its furthest from its first
    for (size_t i = 1; i < shape.size(); ++i) {
      sample *= shape[i];
      extent += (shape[i] - 1) * std::abs(strides[i]);
    }
    if (sample == 0) continue;
    // c samples: c * sample elements, and (c - 1) * |stride 0| + extent in span.
    const int64_t step = std::max<int64_t>(std::abs(strides[0]), 1);
    int64_t c = std::min((limit - 1) / sample, extent >= limit ? 0 : (limit - extent) / step + 1);
    best = std::min({best, c, shape[0]});
  }
  return best == std::numeric_limits<int64_t>::max() ? 0 : std::max<int64_t>(best, 0);
}

// conv2d(x, w).
void conv2d(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  convolve(Pass::Forward, "conv2d", {in[0], in[1].contiguous(), out}, a);
}

// conv2d_input_grad(g, w): the gradient of conv2d's input, of attrs.shape.
void conv2d_input_grad(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  convolve(Pass::InputGrad, "conv2d_input_grad", {out, in[1].contiguous(), in[0]}, a);
}

// conv2d_weight_grad(x, g): the gradient of conv2d's weight, of attrs.shape (contiguous).
void conv2d_weight_grad(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  convolve(Pass::WeightGrad, "conv2d_weight_grad", {in[0], out, in[1]}, a);
}

}  // namespace kiln::cuda
