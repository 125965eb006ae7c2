// cuda/rnn_cuda.cpp -- LSTM and GRU stacks through cuDNN 9's RNN API (cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8), as PyTorch runs them on a GPU: the
// whole recurrence, every layer and direction, in cuDNN's persistent kernels and batched GEMMs
// instead of a kernel chain per time step. Sequence-major, unpadded sequences of one length
// (the descriptors' PADDED_IO mode, which unpacked layouts need). The params are copied into
// cuDNN's weight space each call (one copy per param where cuDNN keeps its gates together, as
// it does), so the module's parameters stay ordinary tensors; their gradients are views of the
// one weight-space gradient. Where cuDNN declines a configuration (NOT_SUPPORTED), the caller
// runs the unrolled composite instead.
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "cuda/cudnn_cuda.h"
#include "cuda/libraries.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/cuda_internal.h"
#include "runtime/log.h"

namespace kiln::cuda {
namespace {

int64_t gates(const RnnSpec& s) { return s.lstm ? 4 : 3; }
int64_t directions(const RnnSpec& s) { return s.bidirectional ? 2 : 1; }
size_t params_per_layer(const RnnSpec& s) { return s.bias ? 4 : 2; }

// cuDNN's descriptors for one call on [T, N] sequences; `status` is the first setup failure.
struct RnnDescriptors {
  const Cudnn& d = cudnn();
  std::string op;
  cudnnHandle_t handle = nullptr;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  cudnnTensorDescriptor_t h = nullptr, matrix = nullptr, bias = nullptr;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  const char* failed = "";
  size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;

  RnnDescriptors(const RnnSpec& s, int device, int64_t t_len, int64_t n, bool training) : op(s.lstm ? "LSTM" : "GRU") {
    handle = dnn_handle(device, op);
    cudnnDataType_t type = dnn_data_type(s.dtype, op);
    // f16 and bf16 compute in f32 (tensor cores); f32 in exact f32 unless TF32 is allowed.
    cudnnDataType_t math_prec = s.dtype == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    cudnnMathType_t math = s.dtype == DType::F32   ? (allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)
                           : s.dtype == DType::F64 ? CUDNN_DEFAULT_MATH
                                                   : CUDNN_TENSOR_OP_MATH;
    int64_t lds = s.num_layers * directions(s);
    std::vector<int> lengths(static_cast<size_t>(n), fits_dnn(t_len, op));
    int dims[3] = {fits_dnn(lds, op), fits_dnn(n, op), fits_dnn(s.hidden_size, op)};
    int strides[3] = {fits_dnn(n * s.hidden_size, op), dims[2], 1};
    cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
    step(d.cudnnCreateDropoutDescriptor(&dropout), "cudnnCreateDropoutDescriptor") &&
        step(d.cudnnSetDropoutDescriptor(dropout, handle, 0.0f, nullptr, 0, 0), "cudnnSetDropoutDescriptor") &&
        step(d.cudnnCreateRNNDescriptor(&rnn), "cudnnCreateRNNDescriptor") &&
        step(d.cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, s.lstm ? CUDNN_LSTM : CUDNN_GRU,
                                        s.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
                                        s.bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
                                        CUDNN_LINEAR_INPUT, type, math_prec, math, fits_dnn(s.input_size, op),
                                        fits_dnn(s.hidden_size, op), fits_dnn(s.hidden_size, op),
                                        fits_dnn(s.num_layers, op), dropout, CUDNN_RNN_PADDED_IO_ENABLED),
             "cudnnSetRNNDescriptor_v8") &&
        step(d.cudnnCreateRNNDataDescriptor(&x), "cudnnCreateRNNDataDescriptor") &&
        step(d.cudnnCreateRNNDataDescriptor(&y), "cudnnCreateRNNDataDescriptor") &&
        step(d.cudnnSetRNNDataDescriptor(x, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, lengths[0], dims[1],
                                         fits_dnn(s.input_size, op), lengths.data(), nullptr),
             "cudnnSetRNNDataDescriptor") &&
        step(d.cudnnSetRNNDataDescriptor(y, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, lengths[0], dims[1],
                                         fits_dnn(s.hidden_size * directions(s), op), lengths.data(), nullptr),
             "cudnnSetRNNDataDescriptor") &&
        step(d.cudnnCreateTensorDescriptor(&h), "cudnnCreateTensorDescriptor") &&
        step(d.cudnnSetTensorNdDescriptor(h, type, 3, dims, strides), "cudnnSetTensorNdDescriptor") &&
        step(d.cudnnCreateTensorDescriptor(&matrix), "cudnnCreateTensorDescriptor") &&
        step(d.cudnnCreateTensorDescriptor(&bias), "cudnnCreateTensorDescriptor") &&
        step(d.cudnnGetRNNWeightSpaceSize(handle, rnn, &weight_bytes), "cudnnGetRNNWeightSpaceSize") &&
        step(d.cudnnGetRNNTempSpaceSizes(handle, rnn, mode, x, &work_bytes, &reserve_bytes),
             "cudnnGetRNNTempSpaceSizes");
  }
  ~RnnDescriptors() {
    if (x) d.cudnnDestroyRNNDataDescriptor(x);
    if (y) d.cudnnDestroyRNNDataDescriptor(y);
    for (cudnnTensorDescriptor_t t : {h, matrix, bias})
      if (t) d.cudnnDestroyTensorDescriptor(t);
    if (rnn) d.cudnnDestroyRNNDescriptor(rnn);
    if (dropout) d.cudnnDestroyDropoutDescriptor(dropout);
  }
  RnnDescriptors(const RnnDescriptors&) = delete;
  RnnDescriptors& operator=(const RnnDescriptors&) = delete;

  // Records the first failure; true while there is none.
  bool step(cudnnStatus_t s, const char* call) {
    if (s != CUDNN_STATUS_SUCCESS && status == CUDNN_STATUS_SUCCESS) status = s, failed = call;
    return s == CUDNN_STATUS_SUCCESS;
  }
  // Throws on a failure other than "not supported" (a bug, not a configuration).
  bool supported() const {
    if (status == CUDNN_STATUS_NOT_SUPPORTED) return false;
    check_dnn(status, failed, op);
    return true;
  }
  // Throws on any failure of `s`.
  void check(cudnnStatus_t s, const char* call) const { check_dnn(s, call, op); }
};

// Where one param's rows lie in the weight space: its gates' blocks ([H, cols] each, or H
// values of a bias), at element offsets.
struct Placement {
  std::vector<int64_t> gate_offsets;
  int64_t gate_numel = 0;
  bool together() const {  // one block after the other, in gate order
    for (size_t g = 1; g < gate_offsets.size(); ++g)
      if (gate_offsets[g] != gate_offsets[0] + static_cast<int64_t>(g) * gate_numel) return false;
    return true;
  }
};

// The params' shapes, per layer and direction: w_ih, w_hh (, b_ih, b_hh).
std::vector<Dims> param_shapes(const RnnSpec& s) {
  std::vector<Dims> shapes;
  const int64_t dirs = directions(s), rows = gates(s) * s.hidden_size;
  for (int64_t l = 0; l < s.num_layers; ++l)
    for (int64_t k = 0; k < dirs; ++k) {
      shapes.push_back({rows, l == 0 ? s.input_size : s.hidden_size * dirs});
      shapes.push_back({rows, s.hidden_size});
      if (s.bias) shapes.insert(shapes.end(), 2, Dims{rows});
    }
  return shapes;
}

// Each param's placement in `space` (the weight space, in the spec's dtype).
std::vector<Placement> placements(const RnnDescriptors& dd, const RnnSpec& s, const Tensor& space) {
  const std::vector<Dims> shapes = param_shapes(s);
  const int64_t g_count = gates(s), lds = s.num_layers * directions(s);
  const size_t per = params_per_layer(s);
  std::vector<Placement> out(shapes.size());
  const char* base = static_cast<const char*>(space.data_ptr());
  const int64_t elem = static_cast<int64_t>(dtype_size(s.dtype));
  for (int64_t p = 0; p < lds; ++p)
    for (int64_t id = 0; id < 2 * g_count; ++id) {
      void *m = nullptr, *b = nullptr;
      dd.check(dd.d.cudnnGetRNNWeightParams(dd.handle, dd.rnn, static_cast<int32_t>(p), dd.weight_bytes,
                                            space.data_ptr(), static_cast<int32_t>(id), dd.matrix, &m,
                                            s.bias ? dd.bias : nullptr, s.bias ? &b : nullptr),
               "cudnnGetRNNWeightParams");
      size_t which = static_cast<size_t>(p) * per + (id < g_count ? 0 : 1);  // w_ih or w_hh
      for (void* at : {m, b}) {
        if (at == nullptr) continue;
        if (at == b) which += 2;  // b_ih or b_hh
        Placement& pl = out[which];
        pl.gate_numel = shapes[which].product() / g_count;
        int64_t bytes = static_cast<const char*>(at) - base;
        KILN_CHECK(bytes >= 0 && bytes % elem == 0 && bytes / elem + pl.gate_numel <= space.numel(),
                   "{}: cuDNN placed a weight outside its weight space", dd.op);
        pl.gate_offsets.push_back(bytes / elem);
      }
    }
  for (size_t i = 0; i < out.size(); ++i)
    KILN_CHECK(out[i].gate_offsets.size() == static_cast<size_t>(g_count), "{}: cuDNN gave {} blocks for param {}",
               dd.op, out[i].gate_offsets.size(), i);
  return out;
}

// The view of `space` that holds param-shaped data at `pl` (or, with its gates apart, a copy).
Tensor gathered(const Tensor& space, const Placement& pl, const Dims& shape) {
  if (pl.together())
    return space.narrow(0, pl.gate_offsets[0], pl.gate_numel * static_cast<int64_t>(pl.gate_offsets.size()))
        .view(shape);
  std::vector<Tensor> blocks;
  for (int64_t off : pl.gate_offsets) blocks.push_back(space.narrow(0, off, pl.gate_numel));
  return cat(blocks, 0).view(shape);
}

void scatter(const Tensor& space, const Placement& pl, const Tensor& param) {
  if (pl.together()) {
    gathered(space, pl, param.shape()).copy_(param);
    return;
  }
  Tensor rows = param.reshape({static_cast<int64_t>(pl.gate_offsets.size()), -1});
  for (size_t g = 0; g < pl.gate_offsets.size(); ++g)
    space.narrow(0, pl.gate_offsets[g], pl.gate_numel).copy_(rows.select(0, static_cast<int64_t>(g)));
}

const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* mut_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace

std::optional<RnnForward> rnn_forward(const RnnSpec& s, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                      std::span<const Tensor> params, bool training, std::string* why) {
  const Cudnn& d = cudnn();
  if (!d.rnn_ok) {
    *why = d.rnn_reason;
    return std::nullopt;
  }
  Device device = x.device();
  const int64_t t_len = x.shape()[0], n = x.shape()[1], lds = s.num_layers * directions(s), h = s.hidden_size;
  RnnDescriptors dd(s, device.index, t_len, n, training);
  if (!dd.supported()) {
    *why = fmt::format("cuDNN does not support it ({} said so)", dd.failed);
    return std::nullopt;
  }
  const int64_t elem = static_cast<int64_t>(dtype_size(s.dtype));
  RnnForward f;
  f.weights = Tensor::empty({s.dtype, {static_cast<int64_t>(dd.weight_bytes) / elem}, device});
  std::vector<Placement> pl = placements(dd, s, f.weights);
  KILN_CHECK(params.size() == pl.size(), "{}: expected {} params, got {}", dd.op, pl.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) scatter(f.weights, pl[i], params[i]);
  f.lengths = full({n}, t_len, DType::I32, device);
  f.y = Tensor::empty({s.dtype, {t_len, n, h * directions(s)}, device});
  f.hy = Tensor::empty({s.dtype, {lds, n, h}, device});
  if (s.lstm) f.cy = Tensor::empty({s.dtype, {lds, n, h}, device});
  if (training && dd.reserve_bytes > 0)
    f.reserve = Tensor::empty({DType::U8, {static_cast<int64_t>(dd.reserve_bytes)}, device});
  Workspace work(dd.work_bytes, device);
  dd.check(d.cudnnRNNForward(dd.handle, dd.rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                             static_cast<const int32_t*>(f.lengths.data_ptr()), dd.x, x.data_ptr(), dd.y,
                             f.y.data_ptr(), dd.h, ptr_or_null(hx), f.hy.data_ptr(), dd.h, ptr_or_null(cx),
                             mut_or_null(f.cy), dd.weight_bytes, f.weights.data_ptr(), dd.work_bytes, work.ptr,
                             dd.reserve_bytes, training ? mut_or_null(f.reserve) : nullptr),
           "cudnnRNNForward");
  log(LogTopic::Cuda, fmt::format("{}: cuDNN, {} layers x {} directions over [{}, {}], {} B of weights, {} B reserved",
                                  dd.op, s.num_layers, directions(s), t_len, n, dd.weight_bytes, dd.reserve_bytes));
  return f;
}

RnnGrads rnn_backward(const RnnSpec& s, const Tensor& x, const Tensor& hx, const Tensor& cx, const RnnForward& f,
                      const Tensor& dy, const Tensor& dhy, const Tensor& dcy, bool weights) {
  const Cudnn& d = cudnn();
  Device device = x.device();
  const int64_t t_len = x.shape()[0], n = x.shape()[1];
  RnnDescriptors dd(s, device.index, t_len, n, /*training=*/true);
  dd.supported();  // the forward ran with the same descriptors: any failure now is an error
  KILN_CHECK(dd.status == CUDNN_STATUS_SUCCESS, "{}: cuDNN declined the backward of a forward it ran", dd.op);
  RnnGrads g;
  g.dx = Tensor::empty({s.dtype, x.shape(), device});
  if (hx.defined()) g.dhx = Tensor::empty({s.dtype, hx.shape(), device});
  if (cx.defined()) g.dcx = Tensor::empty({s.dtype, cx.shape(), device});
  Tensor gy = dy.defined() ? dy.to(s.dtype).contiguous() : zeros(f.y.shape(), s.dtype, device);
  Tensor ghy = dhy.defined() ? dhy.to(s.dtype).contiguous() : Tensor();
  Tensor gcy = dcy.defined() ? dcy.to(s.dtype).contiguous() : Tensor();
  Workspace work(dd.work_bytes, device);
  const auto* lengths = static_cast<const int32_t*>(f.lengths.data_ptr());
  dd.check(
      d.cudnnRNNBackwardData_v8(dd.handle, dd.rnn, lengths, dd.y, f.y.data_ptr(), gy.data_ptr(), dd.x, g.dx.data_ptr(),
                                dd.h, ptr_or_null(hx), ptr_or_null(ghy), mut_or_null(g.dhx), dd.h, ptr_or_null(cx),
                                ptr_or_null(gcy), mut_or_null(g.dcx), dd.weight_bytes, f.weights.data_ptr(),
                                dd.work_bytes, work.ptr, dd.reserve_bytes, mut_or_null(f.reserve)),
      "cudnnRNNBackwardData_v8");
  if (!weights) return g;
  // cuDNN adds into the gradient's space (the one mode it supports): it starts at zero.
  Tensor dspace = zeros(f.weights.shape(), s.dtype, device);
  dd.check(d.cudnnRNNBackwardWeights_v8(dd.handle, dd.rnn, CUDNN_WGRAD_MODE_ADD, lengths, dd.x, x.data_ptr(), dd.h,
                                        ptr_or_null(hx), dd.y, f.y.data_ptr(), dd.weight_bytes, dspace.data_ptr(),
                                        dd.work_bytes, work.ptr, dd.reserve_bytes, mut_or_null(f.reserve)),
           "cudnnRNNBackwardWeights_v8");
  std::vector<Placement> pl = placements(dd, s, dspace);
  std::vector<Dims> shapes = param_shapes(s);
  for (size_t i = 0; i < pl.size(); ++i) g.dparams.push_back(gathered(dspace, pl[i], shapes[i]));
  return g;
}

}  // namespace kiln::cuda
