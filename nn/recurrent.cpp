// nn/recurrent.cpp -- LSTM and GRU (layers, directions, batch_first, dropout between layers,
// initial and final states) and their cells, with torch's gate order, parameter names and
// initialization, so a torch state_dict loads. Composites of ops: the input projection of a
// whole sequence is one matmul per layer and direction; the recurrence is a loop over time
// steps. On CUDA a stack runs through cuDNN: eagerly as one autograd node
// (nn/recurrent_cudnn.cpp), in a trace as an rnn op (nn/recurrent_op.cpp).
#include <cmath>

#include "nn/describe.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/recurrent_cudnn.h"
#include "runtime/check.h"
#include "runtime/rearrange.h"

namespace kiln::nn {

namespace {

// The zero initial state [n, h]: a zero expanded, not zeros({n, h}), so that in a trace its
// batch size stays a size an op takes (expand's shape), which a saved module's dynamic batch
// dim reaches, instead of a constant of one batch's size.
Tensor zero_state(int64_t n, int64_t h, const Tensor& like) {
  return scalar_tensor(0, like.dtype()).to(like.device()).expand({n, h});
}

// One LSTM step from the input's projection xw = x W_ih^T + b_ih + b_hh ([N, 4H]).
std::pair<Tensor, Tensor> lstm_step(const Tensor& xw, const Tensor& h, const Tensor& c, const Tensor& w_hh) {
  std::vector<Tensor> g = chunk(xw + matmul(h, w_hh.t()), 4, -1);  // i, f, g, o
  Tensor c2 = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
  return {sigmoid(g[3]) * tanh(c2), c2};
}

// One GRU step from xw = x W_ih^T + b_ih ([N, 3H]); b_hh enters inside r's product, as torch.
Tensor gru_step(const Tensor& xw, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  Tensor hw = matmul(h, w_hh.t());
  if (b_hh.defined()) hw = hw + b_hh;
  std::vector<Tensor> x3 = chunk(xw, 3, -1), h3 = chunk(hw, 3, -1);  // r, z, n
  Tensor r = sigmoid(x3[0] + h3[0]), z = sigmoid(x3[1] + h3[1]);
  Tensor n = tanh(x3[2] + r * h3[2]);
  return (1.0 - z) * n + z * h;
}

}  // namespace

RNNBase::RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, RNNOptions options)
    : options(options), name_(name), gates_(gates), input_size_(input_size), hidden_size_(hidden_size) {
  KILN_CHECK(input_size > 0 && hidden_size > 0 && options.num_layers > 0,
             "{}: input_size, hidden_size and num_layers must be positive, got {}, {}, {}", name, input_size,
             hidden_size, options.num_layers);
  KILN_CHECK(options.dropout >= 0 && options.dropout < 1, "{}: dropout must be in [0, 1), got {}", name,
             options.dropout);
  int64_t dirs = options.bidirectional ? 2 : 1;
  double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  weights_.resize(static_cast<size_t>(options.num_layers * dirs));
  for (int64_t l = 0; l < options.num_layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      Weights& w = weights_[static_cast<size_t>(l * dirs + d)];
      std::string suffix = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
      int64_t in = l == 0 ? input_size : hidden_size * dirs;
      w.w_ih = empty({gates * hidden_size, in});
      w.w_hh = empty({gates * hidden_size, hidden_size});
      uniform_(w.w_ih, -bound, bound);  // torch: every parameter uniform(-1/sqrt(H), 1/sqrt(H))
      uniform_(w.w_hh, -bound, bound);
      register_parameter("weight_ih" + suffix, w.w_ih);
      register_parameter("weight_hh" + suffix, w.w_hh);
      if (options.bias) {
        w.b_ih = empty({gates * hidden_size});
        w.b_hh = empty({gates * hidden_size});
        uniform_(w.b_ih, -bound, bound);
        uniform_(w.b_hh, -bound, bound);
        register_parameter("bias_ih" + suffix, w.b_ih);
        register_parameter("bias_hh" + suffix, w.b_hh);
      }
    }
}

std::vector<Tensor> detail::unrolled(const RnnStack& st, const Tensor& layer_in0, std::span<const Tensor> states,
                                     std::span<const Tensor> params, double p, bool training) {
  int64_t t_len = layer_in0.shape()[0], n = layer_in0.shape()[1], dirs = st.bidirectional ? 2 : 1, h = st.hidden_size;
  size_t kinds = st.lstm ? 2 : 1, per = st.bias ? 4 : 2;
  std::vector<std::vector<Tensor>> finals(kinds);
  Tensor layer_in = layer_in0;
  for (int64_t l = 0; l < st.num_layers; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      std::span<const Tensor> w = params.subspan(static_cast<size_t>(l * dirs + d) * per, per);
      // Every time step's input projection in one matmul.
      Tensor xw = matmul(layer_in, w[0].t());
      if (st.bias) xw = xw + (st.lstm ? w[2] + w[3] : w[2]);
      std::vector<Tensor> s;
      for (const Tensor& s0 : states) s.push_back(s0.select(0, l * dirs + d));
      if (s.empty()) s.assign(kinds, zero_state(n, h, layer_in0));
      std::vector<Tensor> hs(static_cast<size_t>(t_len));
      for (int64_t step = 0; step < t_len; ++step) {
        int64_t t = d == 0 ? step : t_len - 1 - step;
        if (st.lstm) {
          auto [h2, c2] = lstm_step(xw.select(0, t), s[0], s[1], w[1]);
          s = {h2, c2};
        } else {
          s = {gru_step(xw.select(0, t), s[0], w[1], st.bias ? w[3] : Tensor())};
        }
        hs[static_cast<size_t>(t)] = s[0];
      }
      outs.push_back(t_len > 0 ? stack(hs, 0) : zeros({0, n, h}, layer_in0.dtype(), layer_in0.device()));  // [T, N, H]
      for (size_t k = 0; k < kinds; ++k) finals[k].push_back(s[k]);
    }
    layer_in = dirs == 1 ? outs[0] : cat(outs, 2);
    if (l + 1 < st.num_layers && p > 0) layer_in = dropout(layer_in, p, training);
  }
  std::vector<Tensor> result{layer_in};
  for (const std::vector<Tensor>& f : finals) result.push_back(stack(f, 0));  // [L * D, N, H]
  return result;
}

namespace {

// Layers [first, first + count) of a stack as a stack of their own.
detail::RnnStack layers_of(detail::RnnStack st, int64_t first, int64_t count) {
  if (first > 0) st.input_size = st.hidden_size * (st.bidirectional ? 2 : 1);
  st.num_layers = count;
  return st;
}

}  // namespace

std::vector<Tensor> RNNBase::run(const Tensor& input, const std::vector<Tensor>& state_in) {
  KILN_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3) && input.shape().back() == input_size_,
             "{}: expected an input [T, N, {}] ([N, T, {}] batch_first, or [T, {}] unbatched), got {}", name_,
             input_size_, input_size_, input_size_, type_of(input));
  bool unbatched = input.dim() == 2;
  Tensor x = unbatched ? input.unsqueeze(1) : options.batch_first ? input.transpose(0, 1) : input;  // [T, N, in]
  int64_t n = x.shape()[1], dirs = options.bidirectional ? 2 : 1, h = hidden_size_;
  std::vector<Tensor> states;  // [L * D, N, H] each
  for (const Tensor& s : state_in) {
    Dims want = unbatched ? Dims{options.num_layers * dirs, h} : Dims{options.num_layers * dirs, n, h};
    KILN_CHECK(s.defined() && s.shape() == want, "{}: an initial state must be {}, got {}", name_, shape_str(want),
               type_of(s));
    states.push_back(unbatched ? s.unsqueeze(1) : s);
  }
  std::vector<Tensor> params;
  for (const Weights& w : weights_)
    for (const Tensor& t : {w.w_ih, w.w_hh, w.b_ih, w.b_hh})
      if (t.defined()) params.push_back(t);
  detail::RnnStack st{gates_ == 4, input_size_, hidden_size_, options.num_layers, options.bidirectional, options.bias};
  double p = options.dropout;
  bool training = is_training();
  std::vector<Tensor> result;
  bool traced = detail::traced_on_cuda(x, states, params);
  if (traced || detail::cudnn_may_run(x, states, params)) {
    // Through cuDNN: all layers in one call, or one call per layer with kiln's dropout between.
    // A trace records each call as an rnn op, which runs through cuDNN when the trace does.
    int64_t block = p > 0 && training ? 1 : options.num_layers;
    size_t per = options.bias ? 4 : 2;
    std::vector<std::vector<Tensor>> finals(gates_ == 4 ? 2 : 1);
    Tensor layer_in = x;
    for (int64_t l = 0; l < options.num_layers; l += block) {
      detail::RnnStack part = layers_of(st, l, block);
      std::vector<Tensor> s;
      for (const Tensor& s0 : states) s.push_back(s0.narrow(0, l * dirs, block * dirs));
      std::span<const Tensor> w = std::span<const Tensor>(params).subspan(static_cast<size_t>(l * dirs) * per,
                                                                          static_cast<size_t>(block * dirs) * per);
      detail::RnnComposite composite = [part](const Tensor& xi, std::span<const Tensor> si,
                                              std::span<const Tensor> wi) {
        return detail::unrolled(part, xi, si, wi, 0, false);
      };
      std::vector<Tensor> r =
          traced ? detail::rnn_op_stack(part, layer_in, s, w) : detail::cudnn_stack(part, layer_in, s, w, composite);
      layer_in = r[0];
      if (l + block < options.num_layers && p > 0) layer_in = dropout(layer_in, p, training);
      for (size_t k = 0; k < finals.size(); ++k) finals[k].push_back(r[k + 1]);
    }
    result.push_back(layer_in);
    for (const std::vector<Tensor>& f : finals) result.push_back(f.size() == 1 ? f[0] : cat(f, 0));
  } else {
    result = detail::unrolled(st, x, states, params, p, training);
  }
  for (Tensor& r : result)
    if (unbatched) r = r.select(1, 0);
  if (!unbatched && options.batch_first) result[0] = result[0].transpose(0, 1);
  return result;
}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& input,
                                                             const std::tuple<Tensor, Tensor>& hc) {
  auto [h0, c0] = hc;
  KILN_CHECK(h0.defined() == c0.defined(), "LSTM: give both h0 and c0, or neither");
  std::vector<Tensor> r = run(input, h0.defined() ? std::vector<Tensor>{h0, c0} : std::vector<Tensor>{});
  return {r[0], {r[1], r[2]}};
}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& h0) {
  std::vector<Tensor> r = run(input, h0.defined() ? std::vector<Tensor>{h0} : std::vector<Tensor>{});
  return {r[0], r[1]};
}

// ---- cells ----------------------------------------------------------------------------------

RNNCellBase::RNNCellBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias)
    : name_(name), input_size_(input_size), hidden_size_(hidden_size) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, "{}: sizes must be positive, got {} and {}", name, input_size,
             hidden_size);
  double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  weight_ih = empty({gates * hidden_size, input_size});
  weight_hh = empty({gates * hidden_size, hidden_size});
  uniform_(weight_ih, -bound, bound);
  uniform_(weight_hh, -bound, bound);
  register_parameter("weight_ih", weight_ih);
  register_parameter("weight_hh", weight_hh);
  if (bias) {
    bias_ih = empty({gates * hidden_size});
    bias_hh = empty({gates * hidden_size});
    uniform_(bias_ih, -bound, bound);
    uniform_(bias_hh, -bound, bound);
    register_parameter("bias_ih", bias_ih);
    register_parameter("bias_hh", bias_hh);
  }
}

Tensor RNNCellBase::input_projection(const Tensor& x, bool with_hh_bias) const {
  KILN_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2) && x.shape().back() == input_size_,
             "{}: expected an input [N, {}] or [{}], got {}", name_, input_size_, input_size_, type_of(x));
  Tensor xw = matmul(x.dim() == 1 ? x.unsqueeze(0) : x, weight_ih.t());
  if (bias_ih.defined()) xw = xw + (with_hh_bias ? bias_ih + bias_hh : bias_ih);
  return xw;
}

Tensor RNNCellBase::state_or_zeros(const Tensor& s, const Tensor& x) const {
  int64_t n = x.dim() == 1 ? 1 : x.shape()[0];
  if (!s.defined()) return zero_state(n, hidden_size_, x);
  Dims want = x.dim() == 1 ? Dims{hidden_size_} : Dims{n, hidden_size_};
  KILN_CHECK(s.shape() == want, "{}: a state must be {}, got {}", name_, shape_str(want), s.type().str());
  return x.dim() == 1 ? s.unsqueeze(0) : s;
}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& x, const std::tuple<Tensor, Tensor>& hc) {
  auto [h0, c0] = hc;
  KILN_CHECK(h0.defined() == c0.defined(), "LSTMCell: give both h and c, or neither");
  auto [h, c] = lstm_step(input_projection(x, true), state_or_zeros(h0, x), state_or_zeros(c0, x), weight_hh);
  if (x.dim() == 1) return {h.squeeze(0), c.squeeze(0)};
  return {h, c};
}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h0) {
  Tensor h = gru_step(input_projection(x, false), state_or_zeros(h0, x), weight_hh, bias_hh);
  return x.dim() == 1 ? h.squeeze(0) : h;
}

}  // namespace kiln::nn
