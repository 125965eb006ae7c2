// nn/recurrent_cudnn.cpp -- an LSTM or GRU stack through cuDNN (cuda/rnn_cuda.cpp) as
// one autograd node, PyTorch's _cudnn_rnn: the forward keeps cuDNN's reserve, the packed
// weights and the output; the backward is cuDNN's data gradient, then (when a param needs one)
// its weight gradient. Its inputs are the tensors as cuDNN takes them (contiguous, one dtype,
// under autocast its dtype), so the conversions before it differentiate as usual.
#include "nn/recurrent_cudnn.h"

#include <fmt/format.h>

#include <string>

#include "autograd/autograd.h"
#include "cuda/libraries.h"
#include "runtime/autocast.h"
#include "runtime/autograd_meta.h"
#include "runtime/composite_fusion.h"
#include "runtime/cuda.h"
#include "runtime/log.h"

namespace kiln::nn::detail {
namespace {

// The node's saved tensors: x, hx, cx, then the forward's y, weights, lengths and reserve (what
// every backward reads); then the inputs with their history, for a backward with create_graph.
constexpr size_t kSaved = 7;

class CudnnRnnBackward final : public NodeBackward {
 public:
  CudnnRnnBackward(cuda::RnnSpec spec, size_t num_states, RnnComposite composite)
      : name_(spec.lstm ? "LSTM (cuDNN)" : "GRU (cuDNN)"),
        spec_(spec),
        num_states_(num_states),
        composite_(std::move(composite)) {}

  const std::string& name() const override { return name_; }
  bool differentiable() const override { return true; }
  size_t always_read(size_t) const override { return kSaved; }

  // Edges: x, the states given, then the params.
  std::vector<Tensor> backward(std::span<const Tensor> saved, std::span<const Tensor> grads,
                               std::span<const char> needs, const GradReady*) const override {
    if (grad_enabled()) return recorded_backward(saved, grads, needs);
    NoGradGuard no_grad;
    cuda::RnnForward f;
    f.y = saved[3], f.weights = saved[4], f.lengths = saved[5], f.reserve = saved[6];
    bool weights = false;
    for (size_t i = 1 + num_states_; i < needs.size(); ++i) weights = weights || needs[i];
    Tensor dcy = spec_.lstm ? grads[2] : Tensor();
    cuda::RnnGrads g = cuda::rnn_backward(spec_, saved[0], saved[1], saved[2], f, grads[0], grads[1], dcy, weights);
    std::vector<Tensor> r{g.dx};
    if (num_states_ >= 1) r.push_back(g.dhx);
    if (num_states_ >= 2) r.push_back(g.dcx);
    r.resize(needs.size());
    for (size_t i = 0; i < g.dparams.size(); ++i)
      if (needs[1 + num_states_ + i]) r[1 + num_states_ + i] = g.dparams[i];
    return r;
  }

 private:
  // The composite run again on the inputs, differentiated with its graph recorded.
  std::vector<Tensor> recorded_backward(std::span<const Tensor> saved, std::span<const Tensor> grads,
                                        std::span<const char> needs) const {
    std::vector<Tensor> args(saved.begin() + kSaved, saved.end());  // x, states, params
    std::vector<Tensor> outs;
    {
      CompositeFusionOff unfused;
      std::span<const Tensor> all(args);
      outs = composite_(args[0], all.subspan(1, num_states_), all.subspan(1 + num_states_));
    }
    std::vector<Tensor> ys, gys, xs;
    for (size_t k = 0; k < outs.size() && k < grads.size(); ++k)
      if (grads[k].defined() && outs[k].requires_grad()) ys.push_back(outs[k]), gys.push_back(grads[k]);
    std::vector<size_t> which;
    for (size_t i = 0; i < args.size(); ++i)
      if (needs[i] && args[i].requires_grad()) xs.push_back(args[i]), which.push_back(i);
    std::vector<Tensor> r(args.size());
    if (ys.empty() || xs.empty()) return r;
    std::vector<Tensor> g = autograd::grad(ys, xs, gys, /*retain_graph=*/true, /*create_graph=*/true,
                                           /*allow_unused=*/true);
    for (size_t j = 0; j < which.size(); ++j) r[which[j]] = g[j];
    return r;
  }

  std::string name_;
  cuda::RnnSpec spec_;
  size_t num_states_;
  RnnComposite composite_;
};

}  // namespace

bool cudnn_may_run(const Tensor& x, std::span<const Tensor> states, std::span<const Tensor> params) {
  std::vector<Tensor> all{x};
  all.insert(all.end(), states.begin(), states.end());
  all.insert(all.end(), params.begin(), params.end());
  for (const Tensor& t : all)
    if (!t.defined() || t.device() != x.device()) return false;
  return x.device().is_cuda() && composite_fuses(all);
}

std::vector<Tensor> cudnn_stack(const RnnStack& st, const Tensor& x, std::span<const Tensor> states,
                                std::span<const Tensor> params, const RnnComposite& composite) {
  // cuDNN's operands: one float dtype (autocast's when it is on), contiguous.
  auto operand = [](const Tensor& t) { return autocast_low(t).contiguous(); };
  Tensor xc = operand(x);
  std::vector<Tensor> sc, pc;
  for (const Tensor& s : states) sc.push_back(operand(s));
  for (const Tensor& p : params) pc.push_back(operand(p));
  DType t = xc.dtype();
  bool one_dtype = is_float(t);
  for (const auto* group : {&sc, &pc})
    for (const Tensor& v : *group) one_dtype = one_dtype && v.dtype() == t;
  const char* name = st.lstm ? "LSTM" : "GRU";
  if (!one_dtype) {
    log(LogTopic::Cuda, fmt::format("{}: unrolled, its operands are not of one float dtype", name));
    return composite(x, states, params);
  }
  cuda::RnnSpec spec{st.lstm, st.input_size, st.hidden_size, st.num_layers, st.bidirectional, st.bias, t};
  bool needs_grad = false;
  if (grad_enabled())
    for (const auto* group : {&sc, &pc})
      for (const Tensor& v : *group) needs_grad = needs_grad || v.requires_grad();
  needs_grad = needs_grad || (grad_enabled() && xc.requires_grad());
  Tensor hx = sc.empty() ? Tensor() : sc[0], cx = sc.size() > 1 ? sc[1] : Tensor();
  std::optional<cuda::RnnForward> f;
  std::string why;
  {
    NoGradGuard no_grad;  // packing the params is not part of the graph
    f = cuda::rnn_forward(spec, xc.detach(), hx.defined() ? hx.detach() : hx, cx.defined() ? cx.detach() : cx, pc,
                          needs_grad, &why);
  }
  if (!f) {
    log(LogTopic::Cuda, fmt::format("{}: unrolled, not through cuDNN: {}", name, why));
    return composite(x, states, params);
  }
  std::vector<Tensor> outs{f->y, f->hy};
  if (st.lstm) outs.push_back(f->cy);
  if (!needs_grad) return outs;

  auto node = make_ref<Node>();
  node->custom = std::make_shared<CudnnRnnBackward>(spec, sc.size(), composite);
  node->sequence = next_node_sequence();
  node->num_outputs = static_cast<uint32_t>(outs.size());
  node->device = x.device();
  node->stream = cuda::current_stream(x.device().index).handle();
  std::vector<Tensor> inputs{xc};
  inputs.insert(inputs.end(), sc.begin(), sc.end());
  inputs.insert(inputs.end(), pc.begin(), pc.end());
  for (const Tensor& in : inputs) {
    node->next.push_back(edge_to(in));
    node->in_types.push_back(in.type());
  }
  for (const Tensor& s : {xc, hx, cx, f->y, f->weights, f->lengths, f->reserve})
    save_for_node(*node, s.defined() ? s.detach() : s);
  for (const Tensor& in : inputs) save_for_node(*node, in);
  for (size_t k = 0; k < outs.size(); ++k) set_history(outs[k], node, static_cast<uint32_t>(k));
  return outs;
}

}  // namespace kiln::nn::detail
