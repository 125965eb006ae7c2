// nn/recurrent_op.cpp -- rnn and rnn_backward (runtime/ops.def): a stack of LSTM or GRU layers
// run whole, which a trace records on CUDA (nn/recurrent.cpp) so that a traced step reaches
// cuDNN as an eager one does.
//
//   rnn(x [T, N, in], [h0 [L*D, N, H] [, c0]], params...)  -> [N, T*D*H + kinds*L*D*H]: per batch
//                                                             row, its y, h_n (, c_n)
//   rnn_backward(x, [h0 [, c0]], params..., out, grad)     -> the gradients of x, the states
//                                                             given and each param, packed
//
// Params per layer and direction are torch's w_ih, w_hh (, b_ih, b_hh); the states are given
// (3-d) or not (zeros). Attributes: lstm, hidden_size, num_layers, bidirectional. f32 and f64.
// rnn's result is batch-major so that its parts are cut along a dim that does not grow with
// the batch: a module saved with a dynamic batch dim keeps it (jit/save.cpp).
// The op's meaning is its composition, the unrolled stack (detail::unrolled): that is the
// CPU's kernel, and the CUDA kernel's where cuDNN declines. On CUDA the forward is
// cudnnRNNForward; the backward runs the forward again for cuDNN's reserve (a value the IR
// cannot hold: its size is cuDNN's choice on each device), then cuDNN's data and weight
// gradients. A backward with create_graph differentiates the composite instead.
#include <fmt/format.h>

#include <optional>
#include <string>

#include "autograd/autograd.h"
#include "nn/recurrent_cudnn.h"
#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/cuda_kernels.h"
#include "runtime/log.h"
#include "runtime/ops/defs.h"
#include "runtime/recorder.h"

namespace kiln {
namespace rnn_op {
namespace {

using nn::detail::RnnStack;

// The operands of rnn or rnn_backward (their rule checked them).
struct Operands {
  Tensor x;
  std::vector<Tensor> states, params;
  Tensor out, grad;  // rnn_backward's
};

Operands operands_of(OpId id, std::span<const Tensor> in, const Attrs& a) {
  Operands o;
  size_t end = in.size() - (id == OpId::RnnBackward ? 2 : 0), k = 1;
  o.x = in[0];
  while (k < end && in[k].dim() == 3 && o.states.size() < (a.lstm ? 2u : 1u)) o.states.push_back(in[k++]);
  o.params.assign(in.begin() + static_cast<std::ptrdiff_t>(k), in.begin() + static_cast<std::ptrdiff_t>(end));
  if (id == OpId::RnnBackward) o.out = in[end], o.grad = in[end + 1];
  return o;
}

int64_t dirs(const Attrs& a) { return a.bidirectional ? 2 : 1; }

RnnStack stack_of(const Operands& o, const Attrs& a) {
  int64_t cells = a.num_layers * dirs(a);
  return {a.lstm, o.x.shape()[2], a.hidden_size, a.num_layers, a.bidirectional,
          static_cast<int64_t>(o.params.size()) == 4 * cells};
}

// The results rnn packs: y [T, N, D * H], then h_n (and c_n) [L * D, N, H].
std::vector<Dims> result_shapes(const Tensor& x, const Attrs& a) {
  int64_t t = x.shape()[0], n = x.shape()[1], h = a.hidden_size;
  std::vector<Dims> s{{t, n, dirs(a) * h}};
  for (int k = 0; k < (a.lstm ? 2 : 1); ++k) s.push_back({a.num_layers * dirs(a), n, h});
  return s;
}

// a * b + c, or a kiln::Error for sizes past int64 (a hostile IR file's).
int64_t mul_add(const char* op, int64_t a, int64_t b, int64_t c = 0) {
  int64_t r = 0;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &r) && !__builtin_add_overflow(r, c, &r), "{}: its sizes overflow int64",
             op);
  return r;
}

TensorType rnn_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const char* op = op_name(id);
  KILN_CHECK(a.hidden_size > 0 && a.num_layers > 0 && a.hidden_size <= INT32_MAX && a.num_layers <= INT32_MAX,
             "{}: hidden_size and num_layers must be positive ints, got {} and {}", op, a.hidden_size, a.num_layers);
  size_t extra = id == OpId::RnnBackward ? 2 : 0;
  KILN_CHECK(in.size() >= 1 + extra, "{}: expected x, the initial states (or none), the params{}; got {} operands", op,
             extra ? ", out and grad" : "", in.size());
  Operands o = operands_of(id, in, a);
  const Tensor& x = o.x;
  DType t = x.dtype();
  KILN_CHECK(x.dim() == 3 && (t == DType::F32 || t == DType::F64),
             "{}: expected x [T, N, input_size] in f32 or f64, got {}", op, x.type().str());
  for (int64_t d : x.shape()) KILN_CHECK(d >= 0, "{}: x {} needs concrete sizes", op, x.type().str());
  const int64_t h = a.hidden_size, cells = a.num_layers * dirs(a), gates = a.lstm ? 4 : 3;
  const size_t kinds = a.lstm ? 2 : 1;
  KILN_CHECK(o.states.empty() || o.states.size() == kinds, "{}: give {} initial states ([{}, {}, {}]) or none, got {}",
             op, kinds, cells, x.shape()[1], h, o.states.size());
  mul_add(op, mul_add(op, cells, x.shape()[1]), h);  // (a state's size)
  TensorType state{t, {cells, x.shape()[1], h}, x.device()};
  for (const Tensor& s : o.states)
    KILN_CHECK(s.type() == state, "{}: an initial state must be {}, got {}", op, state.str(), s.type().str());
  size_t n = o.params.size();
  KILN_CHECK(n == static_cast<size_t>(2 * cells) || n == static_cast<size_t>(4 * cells),
             "{}: expected {} params (w_ih and w_hh per layer and direction) or {} (with b_ih and b_hh), got {}", op,
             2 * cells, 4 * cells, n);
  size_t per = n / static_cast<size_t>(cells);
  for (int64_t c = 0; c < cells; ++c) {
    int64_t width = c < dirs(a) ? x.shape()[2] : dirs(a) * h;  // layer 0 reads x, the others the layer below
    Dims want[] = {{gates * h, width}, {gates * h, h}, {gates * h}, {gates * h}};
    for (size_t k = 0; k < per; ++k) {
      const Tensor& p = o.params[static_cast<size_t>(c) * per + k];
      TensorType w{t, want[k], x.device()};
      KILN_CHECK(p.type() == w, "{}: param {} (layer {}, direction {}) must be {}, got {}", op,
                 static_cast<size_t>(c) * per + k, c / dirs(a), c % dirs(a), w.str(), p.type().str());
    }
  }
  // [N, T*D*H + kinds*L*D*H]
  int64_t row =
      mul_add(op, static_cast<int64_t>(kinds), mul_add(op, cells, h), mul_add(op, x.shape()[0], dirs(a) * h));
  mul_add(op, row, x.shape()[1]);  // (the value's size)
  TensorType packed{t, {x.shape()[1], row}, x.device()};
  if (id == OpId::Rnn) return packed;
  KILN_CHECK(o.out.type() == packed && o.grad.type() == packed, "{}: out {} and grad {} must be rnn's result, {}", op,
             o.out.type().str(), o.grad.type().str(), packed.str());
  int64_t grads = 0;
  for (size_t i = 0; i + 2 < in.size(); ++i) grads = mul_add(op, 1, in[i].numel(), grads);
  return {t, {grads}, x.device()};
}

// rnn's results [T or L*D, N, ...] packed batch-major: [N, the rest of each, in order].
Tensor pack_rows(const std::vector<Tensor>& parts) {
  std::vector<Tensor> rows;
  for (const Tensor& p : parts)
    rows.push_back(p.transpose(0, 1).reshape({p.shape()[1], p.shape()[0] * p.shape()[2]}));
  return cat(rows, 1);
}

// rnn's results out of its packed [N, ...] value, shaped (views where they can be).
std::vector<Tensor> unpack_rows(const Tensor& packed, std::span<const Dims> shapes) {
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (const Dims& s : shapes) {
    int64_t width = s[0] * s[2];
    parts.push_back(packed.slice(1, at, at + width).reshape({s[1], s[0], s[2]}).transpose(0, 1));
    at += width;
  }
  return parts;
}

// The tensors flattened and packed, as rnn_backward gives them.
Tensor pack(const std::vector<Tensor>& parts) {
  std::vector<Tensor> flat;
  for (const Tensor& p : parts) flat.push_back(p.reshape({p.numel()}));
  return cat(flat, 0);
}

void write(const Tensor& result, const Tensor& out) {
  GradModeGuard no_grad(false);
  Tensor o = out;
  o.copy_(result);
}

// The kernel of both ops from the composite (the CPU's; CUDA's where cuDNN declines). The
// backward differentiates the composite run again on the inputs.
void by_composite(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  Operands o = operands_of(id, in, a);
  RnnStack st = stack_of(o, a);
  if (id == OpId::Rnn) {
    GradModeGuard no_grad(false);
    return write(pack_rows(nn::detail::unrolled(st, o.x, o.states, o.params, 0, false)), out);
  }
  std::vector<Tensor> leaves, g;
  {
    GradModeGuard grad(true);
    for (size_t i = 0; i + 2 < in.size(); ++i) leaves.push_back(in[i].detach().requires_grad_());
    std::span<const Tensor> all(leaves);
    std::vector<Tensor> ys = nn::detail::unrolled(st, leaves[0], all.subspan(1, o.states.size()),
                                                  all.subspan(1 + o.states.size()), 0, false);
    std::vector<Dims> shapes = result_shapes(o.x, a);
    std::vector<Tensor> gys = unpack_rows(o.grad, shapes);
    g = autograd::grad(ys, leaves, gys, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
  }
  GradModeGuard no_grad(false);
  for (size_t i = 0; i < g.size(); ++i)
    if (!g[i].defined()) g[i] = zeros_like(leaves[i]);
  write(pack(g), out);
}

// Through cuDNN (runtime/cuda/rnn_cuda.cpp), else the composite.
void on_cuda(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  if (out.numel() == 0) return;
  Operands o = operands_of(id, in, a);
  RnnStack st = stack_of(o, a);
  if (o.x.numel() == 0) return by_composite(id, in, a, out);
  GradModeGuard no_grad(false);
  cuda::RnnSpec spec{st.lstm, st.input_size, st.hidden_size, st.num_layers, st.bidirectional, st.bias, o.x.dtype()};
  Tensor x = o.x.contiguous();
  Tensor hx = o.states.empty() ? Tensor() : o.states[0].contiguous();
  Tensor cx = o.states.size() > 1 ? o.states[1].contiguous() : Tensor();
  std::vector<Tensor> params;
  for (const Tensor& p : o.params) params.push_back(p.contiguous());
  std::string why;
  std::optional<cuda::RnnForward> f = cuda::rnn_forward(spec, x, hx, cx, params, id == OpId::RnnBackward, &why);
  if (!f) {
    log(LogTopic::Cuda, fmt::format("{}: by its composite, not through cuDNN: {}", op_name(id), why));
    return by_composite(id, in, a, out);
  }
  if (id == OpId::Rnn) {
    std::vector<Tensor> parts{f->y, f->hy};
    if (st.lstm) parts.push_back(f->cy);
    return write(pack_rows(parts), out);
  }
  std::vector<Dims> shapes = result_shapes(o.x, a);
  std::vector<Tensor> gys = unpack_rows(o.grad, shapes);
  for (Tensor& g : gys) g = g.contiguous();
  cuda::RnnGrads g = cuda::rnn_backward(spec, x, hx, cx, *f, gys[0], gys[1], st.lstm ? gys[2] : Tensor(),
                                        /*weights=*/true);
  std::vector<Tensor> parts{g.dx};
  if (!o.states.empty()) parts.push_back(g.dhx);
  if (o.states.size() > 1) parts.push_back(g.dcx);
  parts.insert(parts.end(), g.dparams.begin(), g.dparams.end());
  write(pack(parts), out);
}

// Under create_graph, the composite's gradients, differentiable again: the composite run on
// the inputs with their history, differentiated with its graph recorded.
Grads composite_vjp(const VjpArgs& v, const Operands& o) {
  RnnStack st = stack_of(o, v.attrs);
  std::vector<Tensor> ys = nn::detail::unrolled(st, o.x, o.states, o.params, 0, false);
  std::vector<Tensor> gys = unpack_rows(v.grad, result_shapes(o.x, v.attrs)), xs;
  std::vector<size_t> which;
  for (size_t i = 0; i < v.in.size(); ++i)
    if (v.needs_grad(static_cast<int>(i)) && v.in[i].requires_grad()) xs.push_back(v.in[i]), which.push_back(i);
  Grads g(v.in.size());
  if (xs.empty()) return g;
  std::vector<Tensor> r = autograd::grad(ys, xs, gys, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
  for (size_t j = 0; j < which.size(); ++j) g[which[j]] = r[j];
  return g;
}

Grads rnn_vjp(const VjpArgs& v) {
  Operands o = operands_of(OpId::Rnn, v.in, v.attrs);
  if (grad_enabled()) return composite_vjp(v, o);
  std::vector<Tensor> bin(v.in.begin(), v.in.end());
  bin.push_back(v.out);
  bin.push_back(v.grad);
  Tensor packed = apply(OpId::RnnBackward, bin, v.attrs);
  Grads g(v.in.size());
  int64_t at = 0;
  for (size_t i = 0; i < v.in.size(); ++i) {
    const Dims& s = v.in_types[i].shape;
    if (v.needs_grad(static_cast<int>(i))) g[i] = packed.slice(0, at, at + s.product()).reshape(s);
    at += s.product();
  }
  return g;
}

const bool g_on_cuda = [] {
  cuda::set_op_kernel(OpId::Rnn, on_cuda);
  cuda::set_op_kernel(OpId::RnnBackward, on_cuda);
  return true;
}();

}  // namespace
}  // namespace rnn_op

constexpr uint64_t kRnnAttrs = kAttrLstm | kAttrHiddenSize | kAttrNumLayers | kAttrBidirectional;
// rnn(x, [h0 [, c0]], params...): y, h_n (, c_n) packed.
const OpDef defs::Rnn{.infer = rnn_op::rnn_rule, .cpu = rnn_op::by_composite, .vjp = rnn_op::rnn_vjp,
                      .saves = kSaveBoth, .attrs = kRnnAttrs};
// rnn_backward(x, [h0 [, c0]], params..., out, grad): the inputs' gradients packed.
const OpDef defs::RnnBackward{.infer = rnn_op::rnn_rule, .cpu = rnn_op::by_composite, .differentiable = false,
                              .saves = kSaveNothing, .attrs = kRnnAttrs};

namespace nn::detail {

bool traced_on_cuda(const Tensor& x, std::span<const Tensor> states, std::span<const Tensor> params) {
  if (!active_recorder() || !x.defined() || !x.device().is_cuda()) return false;
  for (const auto* group : {&states, &params})
    for (const Tensor& t : *group)
      if (!t.defined() || t.device() != x.device()) return false;
  return true;
}

std::vector<Tensor> rnn_op_stack(const RnnStack& st, const Tensor& x, std::span<const Tensor> states,
                                 std::span<const Tensor> params) {
  bool fits = !autocast_dtype() && (x.dtype() == DType::F32 || x.dtype() == DType::F64);
  for (const auto* group : {&states, &params})
    for (const Tensor& t : *group) fits = fits && t.dtype() == x.dtype();
  if (!fits) return unrolled(st, x, states, params, 0, false);
  Attrs a;
  a.lstm = st.lstm;
  a.hidden_size = st.hidden_size;
  a.num_layers = st.num_layers;
  a.bidirectional = st.bidirectional;
  std::vector<Tensor> in{x};
  in.insert(in.end(), states.begin(), states.end());
  in.insert(in.end(), params.begin(), params.end());
  std::vector<Dims> shapes = rnn_op::result_shapes(x, a);
  return rnn_op::unpack_rows(apply(OpId::Rnn, in, a), shapes);
}

}  // namespace nn::detail
}  // namespace kiln
