// nn/recurrent_op.cpp -- the definitions of rnn and rnn_backward (runtime/ops/rnn.h: their
// operands, rule and packing), registered with the runtime when the library loads: their
// meaning is the unrolled stack (detail::unrolled), which lives here, above the runtime. That
// composite is the CPU's kernel, and the CUDA kernel's where cuDNN declines (cuda/rnn.cpp). A
// trace records the op on CUDA (nn/recurrent.cpp) so that a traced step reaches cuDNN as an
// eager one does. A backward with create_graph differentiates the composite.
#include "autograd/autograd.h"
#include "nn/recurrent_cudnn.h"
#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/rnn.h"
#include "runtime/recorder.h"

namespace kiln {
namespace rnn_op {
namespace {

using nn::detail::RnnStack;

RnnStack stack_of(const Operands& o, const Attrs& a) {
  return {a.lstm, o.x.shape()[2], a.hidden_size, a.num_layers, a.bidirectional, has_bias(o, a)};
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
  std::vector<Tensor> r =
      autograd::grad(ys, xs, gys, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
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

}  // namespace
}  // namespace rnn_op

namespace {

constexpr uint64_t kRnnAttrs = kAttrLstm | kAttrHiddenSize | kAttrNumLayers | kAttrBidirectional;

// The gates' products at every step, layer and direction: each step multiplies its input and
// its state into gates * H values. The backward runs the forward again (for cuDNN's reserve),
// then the products of the data and the weight gradients: three times the forward's.
double rnn_forward_flops(const TensorType& x, const Attrs& a) {
  const double t = static_cast<double>(x.shape[0]), n = static_cast<double>(x.shape[1]);
  const double h = static_cast<double>(a.hidden_size), gates = a.lstm ? 4 : 3, d = a.bidirectional ? 2 : 1;
  double per_step = 0;
  for (int64_t l = 0; l < a.num_layers; ++l) {
    double width = l == 0 ? static_cast<double>(x.shape[2]) : d * h;
    per_step += d * 2 * n * gates * h * (width + h);
  }
  return t * per_step;
}
double rnn_flops(std::span<const TensorType> in, const TensorType&, const Attrs& a) {
  return rnn_forward_flops(in[0], a);
}
double rnn_backward_flops(std::span<const TensorType> in, const TensorType&, const Attrs& a) {
  return 3 * rnn_forward_flops(in[0], a);
}
// rnn(x, [h0 [, c0]], params...): y, h_n (, c_n) packed.
const OpDef kRnn{.infer = rnn_op::rnn_rule,
                 .cpu = rnn_op::by_composite,
                 .vjp = rnn_op::rnn_vjp,
                 .saves = kSaveBoth,
                 .attrs = kRnnAttrs,
                 .flops = rnn_flops};
// rnn_backward(x, [h0 [, c0]], params..., out, grad): the inputs' gradients packed.
const OpDef kRnnBackward{.infer = rnn_op::rnn_rule,
                         .cpu = rnn_op::by_composite,
                         .differentiable = false,
                         .saves = kSaveNothing,
                         .attrs = kRnnAttrs,
                         .flops = rnn_backward_flops};
const bool g_registered = (register_op_def(OpId::Rnn, kRnn), register_op_def(OpId::RnnBackward, kRnnBackward), true);

}  // namespace

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
