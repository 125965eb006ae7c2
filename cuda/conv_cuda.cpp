// cuda/conv_cuda.cpp -- conv2d and its two gradients on CUDA through cuDNN 9
// (cudnn_cuda.h). Its legacy convolution calls (cudnnConvolutionForward, ...BackwardData, ...BackwardFilter), which
// cuDNN 9 keeps (marked deprecated in favour of its graph API, whose descriptors would add
// nothing for these three ops): NCHW, any input strides, groups, dilation; the first algorithm
// cuDNN's heuristics rank as working, its workspace from the caching allocator. The choice is
// searched once per convolution key and device and cached (cuDNN's heuristic query costs about
// a millisecond: an eager ResNet-50 step makes 158 convolution calls), as PyTorch caches its
// per key. Where cuDNN has none, contiguous operands and then wider dtypes are tried
// (convolve), said once per configuration and counted (cuda::conv_stats); a configuration that
// not even f64 supports is a kiln::Error naming it, never a wrong answer. Their kernels are in
// cuda/op_table.cpp's table.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/cudnn_cuda.h"
#include "cuda/libraries.h"
#include "cuda/op_kernels.h"
#include "jit/disk_cache.h"
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

std::atomic<int64_t> g_searches{0}, g_cached{0}, g_loaded{0}, g_contiguous{0}, g_wider{0};
std::atomic<bool> g_benchmark{false};

// Everything the descriptors of a call say, and how its algorithm is chosen (cuDNN's heuristics,
// or timed under set_cudnn_benchmark): cuDNN's choice for a key holds for every call of it on
// one kind of device.
std::string algorithm_key(Pass p, const std::array<Tensor, 3>& t, const Attrs& a, bool timed) {
  const DType dtype = t[0].dtype();
  std::string key = fmt::format("{}|{}|{}|{}|{}", static_cast<int>(p), timed ? "timed" : "ranked", dtype_name(dtype),
                                dtype == DType::F32 && allow_tf32() ? "tf32" : "fma", a.groups);
  for (const Tensor& x : t) key += fmt::format("|{}:{}", fmt::join(x.shape(), ","), fmt::join(x.strides(), ","));
  key += fmt::format("|{}|{}|{}", fmt::join(a.stride, ","), fmt::join(a.padding, ","), fmt::join(a.dilation, ","));
  return key;
}

// cuDNN's choice for a key: the algorithm and its workspace, or none (algo -1: cuDNN has no
// algorithm for the call as given, and convolve falls back).
struct Choice {
  int algo = -1;
  size_t memory = 0;
};

// The choices in memory, per device and key; and on disk beside the compiled kernels
// (jit/disk_cache.h), under an identity naming cuDNN's version and the device's architecture and
// multiprocessors, so a warm start searches nothing.
struct Choices {
  std::mutex mu;
  std::unordered_map<std::string, Choice> by_key;  // "<device>|<key>"
};
Choices& choices() {
  static Choices* c = new Choices();  // never destroyed: convolutions may run at exit
  return *c;
}
std::string disk_identity(int device, const std::string& key) {
  return fmt::format("kiln cudnn convolution choice 1\ncudnn {}; sm_{}, {} multiprocessors\n{}",
                     cudnn().cudnnGetVersion(), compute_capability(device), multiprocessor_count(device), key);
}
// A choice on disk is "<algo> <workspace bytes>". The entry is checksummed, but the file is
// still read as hostile: anything but two numbers in range is ignored (and searched over).
std::optional<Choice> decode_choice(const std::string& s, int algo_count) {
  Choice c;
  const char *p = s.data(), *end = s.data() + s.size();
  auto [q, e1] = std::from_chars(p, end, c.algo);
  if (e1 != std::errc() || q == end || *q != ' ') return std::nullopt;
  auto [r, e2] = std::from_chars(q + 1, end, c.memory);
  if (e2 != std::errc() || r != end || c.algo < -1 || c.algo >= algo_count || c.memory > (size_t{1} << 40))
    return std::nullopt;
  return c;
}
std::optional<Choice> cached_choice(int device, const std::string& key, int algo_count) {
  Choices& c = choices();
  const std::string k = fmt::format("{}|{}", device, key);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.by_key.find(k);
    if (it != c.by_key.end()) {
      g_cached.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  std::optional<std::string> stored = jit::disk_cache_get(disk_identity(device, key));
  std::optional<Choice> choice = stored ? decode_choice(*stored, algo_count) : std::nullopt;
  if (!choice) return std::nullopt;
  g_loaded.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(c.mu);
  c.by_key[k] = *choice;
  return choice;
}
void remember(int device, const std::string& key, std::optional<Choice> choice) {
  Choices& c = choices();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    const std::string k = fmt::format("{}|{}", device, key);
    if (choice) c.by_key[k] = *choice;
    else c.by_key.erase(k);
  }
  if (choice) jit::disk_cache_put(disk_identity(device, key), fmt::format("{} {}", choice->algo, choice->memory));
}

// Logs `message` under KILN_LOG=cuda the first time it is said: a fallback a convolution takes
// on every call of its configuration is said once.
void log_once(const std::string& message) {
  static std::mutex mu;
  static auto* said = new std::unordered_set<std::string>();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said->insert(message).second) return;
  }
  log(LogTopic::Cuda, message);
}

// The workspace cudnnFind* times its candidates in: what the largest of those the heuristics
// (`rank`) call working asks for, up to 512 MiB (one needing more is not among the results, as
// with PyTorch's cap), less when the allocator has less.
template <class Perf, class Rank> Workspace search_workspace(Device device, int count, Rank rank) {
  std::vector<Perf> perf(static_cast<size_t>(count));
  int n = 0;
  size_t want = 0;
  if (rank(count, &n, perf.data()) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < n; ++i)
      if (perf[static_cast<size_t>(i)].status == CUDNN_STATUS_SUCCESS)
        want = std::max(want, perf[static_cast<size_t>(i)].memory);
  for (size_t bytes = std::min(want, size_t{512} << 20);; bytes /= 2) {
    try {
      return Workspace(bytes, device);
    } catch (const OutOfMemory&) {
      if (bytes < (size_t{1} << 20)) return Workspace(0, device);
    }
  }
}

// Ranks `Perf`'s algorithms with `rank` (cuDNN's heuristics) or, `timed`, with `find` (cuDNN
// timing them in a workspace search_workspace sizes) and runs, through
// `call`, the first that works and whose workspace fits in memory (an algorithm may ask for
// gigabytes: the next one is tried, as the next is when cuDNN says one does not support the
// configuration). False when none ran; an out-of-memory error when only memory stopped them.
// A key searched before runs its cached choice; where that no longer runs (its workspace does
// not fit now, cuDNN declines it, or a choice read from disk is wrong here), the key is searched
// again.
template <class Perf, class Rank, class Find, class Call>
bool rank_and_run(const std::string& key, bool timed, int algo_count, Rank rank, Find find, Call call,
                  const std::string& op, const char* rank_name, const char* find_name, const char* call_name,
                  Device device) {
  using Algo = decltype(Perf::algo);
  if (std::optional<Choice> c = cached_choice(device.index, key, algo_count)) {
    if (c->algo < 0) return false;
    try {
      Workspace ws(c->memory, device);
      if (call(static_cast<Algo>(c->algo), ws.ptr, c->memory) == CUDNN_STATUS_SUCCESS) return true;
    } catch (const OutOfMemory&) {
    }
    remember(device.index, key, std::nullopt);
  }
  g_searches.fetch_add(1, std::memory_order_relaxed);
  std::vector<Perf> perf(static_cast<size_t>(algo_count));
  int n = 0;
  cudnnStatus_t s;
  if (timed) {
    Workspace ws = search_workspace<Perf>(device, algo_count, rank);
    s = find(algo_count, &n, perf.data(), ws.ptr, ws.bytes);
  } else {
    s = rank(algo_count, &n, perf.data());
  }
  if (s == CUDNN_STATUS_NOT_SUPPORTED) {
    remember(device.index, key, Choice{});
    return false;
  }
  check_dnn(s, timed ? find_name : rank_name, op);
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
    remember(device.index, key, Choice{static_cast<int>(algo.algo), algo.memory});
    return true;
  }
  if (no_room) throw *no_room;  // (not remembered: another call may find the memory)
  remember(device.index, key, Choice{});
  return false;
}

// One try at `p` over t = {x, w, y} as they are laid out; false when cuDNN has no algorithm.
// Under set_cudnn_benchmark a new key times cuDNN's candidates (cudnnFind*Ex, which runs them on
// these tensors, writing only the output); never while the stream is captured into a graph,
// where its synchronization is not allowed: the heuristics rank then.
bool attempt(Pass p, const std::string& op, const std::array<Tensor, 3>& t, const Attrs& a) {
  const Tensor &x = t[0], &w = t[1], &y = t[2];
  Device device = t[written(p)].device();
  Conv c(op.c_str(), x, w.shape(), y, a);
  cudnnHandle_t h = dnn_handle(device.index, op);
  const bool timed = cudnn_benchmark() && !is_capturing(reinterpret_cast<uintptr_t>(current(device.index)));
  const std::string key = algorithm_key(p, t, a, timed);
  const Cudnn& d = c.d;
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64 = x.dtype() == DType::F64;
  const void* one = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* zero = f64 ? static_cast<const void*>(&zero64) : &zero32;
  switch (p) {
    case Pass::Forward:
      return rank_and_run<cudnnConvolutionFwdAlgoPerf_t>(
          key, timed, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
          [&](int m, int* n, cudnnConvolutionFwdAlgoPerf_t* perf) {
            return d.cudnnGetConvolutionForwardAlgorithm_v7(h, c.x, c.w, c.conv, c.y, m, n, perf);
          },
          [&](int m, int* n, cudnnConvolutionFwdAlgoPerf_t* perf, void* ws, size_t bytes) {
            return d.cudnnFindConvolutionForwardAlgorithmEx(h, c.x, x.data_ptr(), c.w, w.data_ptr(), c.conv, c.y,
                                                            y.data_ptr(), m, n, perf, ws, bytes);
          },
          [&](cudnnConvolutionFwdAlgo_t algo, void* ws, size_t bytes) {
            return d.cudnnConvolutionForward(h, one, c.x, x.data_ptr(), c.w, w.data_ptr(), c.conv, algo, ws, bytes,
                                             zero, c.y, y.data_ptr());
          },
          op, "cudnnGetConvolutionForwardAlgorithm_v7", "cudnnFindConvolutionForwardAlgorithmEx",
          "cudnnConvolutionForward", device);
    case Pass::InputGrad:
      return rank_and_run<cudnnConvolutionBwdDataAlgoPerf_t>(
          key, timed, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
          [&](int m, int* n, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
            return d.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w, c.y, c.conv, c.x, m, n, perf);
          },
          [&](int m, int* n, cudnnConvolutionBwdDataAlgoPerf_t* perf, void* ws, size_t bytes) {
            return d.cudnnFindConvolutionBackwardDataAlgorithmEx(h, c.w, w.data_ptr(), c.y, y.data_ptr(), c.conv, c.x,
                                                                 x.data_ptr(), m, n, perf, ws, bytes);
          },
          [&](cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t bytes) {
            return d.cudnnConvolutionBackwardData(h, one, c.w, w.data_ptr(), c.y, y.data_ptr(), c.conv, algo, ws, bytes,
                                                  zero, c.x, x.data_ptr());
          },
          op, "cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnFindConvolutionBackwardDataAlgorithmEx",
          "cudnnConvolutionBackwardData", device);
    case Pass::WeightGrad:
      return rank_and_run<cudnnConvolutionBwdFilterAlgoPerf_t>(
          key, timed, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
          [&](int m, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
            return d.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x, c.y, c.conv, c.w, m, n, perf);
          },
          [&](int m, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* ws, size_t bytes) {
            return d.cudnnFindConvolutionBackwardFilterAlgorithmEx(h, c.x, x.data_ptr(), c.y, y.data_ptr(), c.conv, c.w,
                                                                   w.data_ptr(), m, n, perf, ws, bytes);
          },
          [&](cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t bytes) {
            return d.cudnnConvolutionBackwardFilter(h, one, c.x, x.data_ptr(), c.y, y.data_ptr(), c.conv, algo, ws,
                                                    bytes, zero, c.w, w.data_ptr());
          },
          op, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnFindConvolutionBackwardFilterAlgorithmEx",
          "cudnnConvolutionBackwardFilter", device);
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
      log_once(fmt::format("{}: no cuDNN algorithm for {} x {} -> {} {}; trying contiguous {}", op,
                           shape_str(t[0].shape()), shape_str(t[1].shape()), shape_str(t[2].shape()), tried,
                           dtype_name(wide)));
    tried = fmt::format("contiguous {}", dtype_name(wide));
    if (attempt(p, op, packed, a)) {
      (wide == result.dtype() ? g_contiguous : g_wider).fetch_add(1, std::memory_order_relaxed);
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

ConvStats conv_stats() {
  return {g_searches.load(std::memory_order_relaxed), g_cached.load(std::memory_order_relaxed),
          g_loaded.load(std::memory_order_relaxed), g_contiguous.load(std::memory_order_relaxed),
          g_wider.load(std::memory_order_relaxed)};
}

void set_cudnn_benchmark(bool timed) { g_benchmark.store(timed, std::memory_order_relaxed); }
bool cudnn_benchmark() { return g_benchmark.load(std::memory_order_relaxed); }

void forget_conv_algorithms() {
  Choices& c = choices();
  std::lock_guard<std::mutex> lock(c.mu);
  c.by_key.clear();
}

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
