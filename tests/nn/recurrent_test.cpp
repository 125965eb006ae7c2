// tests/nn/recurrent_test.cpp -- LSTM, GRU and their cells against the recurrences written out
// here in double loops: layers, both directions, batch_first, initial and final states,
// unbatched input, torch's parameter names, gradients by finite differences, and a trace.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

using Vec = std::vector<double>;
double sig(double v) { return 1 / (1 + std::exp(-v)); }

// y = W x + b for W [rows, cols] row-major.
Vec affine(const Vec& w, const Vec& b, const Vec& x) {
  size_t rows = w.size() / x.size();
  Vec y(rows);
  for (size_t r = 0; r < rows; ++r) {
    double acc = b.empty() ? 0 : b[r];
    for (size_t c = 0; c < x.size(); ++c) acc += w[r * x.size() + c] * x[c];
    y[r] = acc;
  }
  return y;
}

struct RnnRef {
  Vec out;              // [T, N, D * H]
  std::vector<Vec> hn;  // per layer-direction, [N * H]
  std::vector<Vec> cn;
};

// The recurrence of `kind` ("lstm" or "gru") over x [T, N, in] (time-major), from named
// parameters, with zero initial states.
RnnRef recurrent_ref(const std::string& kind, const Tensor& x, std::map<std::string, Tensor> params, int64_t layers,
                     bool bidirectional, int64_t hidden) {
  int64_t t_len = x.shape()[0], n = x.shape()[1], dirs = bidirectional ? 2 : 1;
  std::vector<std::vector<Vec>> in(static_cast<size_t>(t_len), std::vector<Vec>(static_cast<size_t>(n)));
  Vec xv = x.contiguous().to_vector<double>();
  int64_t f = x.shape()[2];
  for (int64_t t = 0; t < t_len; ++t)
    for (int64_t b = 0; b < n; ++b)
      in[size_t(t)][size_t(b)] = Vec(xv.begin() + (t * n + b) * f, xv.begin() + (t * n + b + 1) * f);
  RnnRef ref;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<std::vector<Vec>> next(static_cast<size_t>(t_len), std::vector<Vec>(static_cast<size_t>(n)));
    for (int64_t d = 0; d < dirs; ++d) {
      std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      Vec wih = params.at("weight_ih" + sfx).to_vector<double>(),
          whh = params.at("weight_hh" + sfx).to_vector<double>();
      Vec bih = params.at("bias_ih" + sfx).to_vector<double>(), bhh = params.at("bias_hh" + sfx).to_vector<double>();
      Vec hn, cn;
      for (int64_t b = 0; b < n; ++b) {
        Vec h(size_t(hidden), 0.0), c(size_t(hidden), 0.0);
        for (int64_t s = 0; s < t_len; ++s) {
          int64_t t = d ? t_len - 1 - s : s;
          Vec gx = affine(wih, bih, in[size_t(t)][size_t(b)]), gh = affine(whh, bhh, h);
          for (int64_t k = 0; k < hidden; ++k) {
            size_t K = size_t(k), H = size_t(hidden);
            if (kind == "lstm") {
              double i = sig(gx[K] + gh[K]), fg = sig(gx[H + K] + gh[H + K]),
                     g = std::tanh(gx[2 * H + K] + gh[2 * H + K]), o = sig(gx[3 * H + K] + gh[3 * H + K]);
              c[K] = fg * c[K] + i * g;
              gx[K] = o * std::tanh(c[K]);  // the new h, kept aside until every k is done
            } else {
              double r = sig(gx[K] + gh[K]), z = sig(gx[H + K] + gh[H + K]);
              double nn = std::tanh(gx[2 * H + K] + r * gh[2 * H + K]);
              gx[K] = (1 - z) * nn + z * h[K];
            }
          }
          for (int64_t k = 0; k < hidden; ++k) h[size_t(k)] = gx[size_t(k)];
          Vec& o = next[size_t(t)][size_t(b)];
          o.resize(size_t(dirs * hidden));
          for (int64_t k = 0; k < hidden; ++k) o[size_t(d * hidden + k)] = h[size_t(k)];
        }
        hn.insert(hn.end(), h.begin(), h.end());
        cn.insert(cn.end(), c.begin(), c.end());
      }
      ref.hn.push_back(hn);
      ref.cn.push_back(cn);
    }
    in = next;
  }
  for (auto& row : in)
    for (auto& v : row) ref.out.insert(ref.out.end(), v.begin(), v.end());
  return ref;
}

Vec joined(const std::vector<Vec>& parts) {
  Vec out;
  for (const Vec& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST(LSTM, MatchesTheRecurrenceInEveryShape) {
  for (bool bidirectional : {false, true})
    for (bool batch_first : {false, true}) {
      SCOPED_TRACE(testing::Message() << "bidirectional " << bidirectional << " batch_first " << batch_first);
      nn::LSTM lstm(3, 4, {.num_layers = 2, .batch_first = batch_first, .bidirectional = bidirectional});
      Tensor x = randn({5, 2, 3});  // time-major
      auto [out, hc] = lstm(batch_first ? x.transpose(0, 1).contiguous() : x);
      auto [hn, cn] = hc;
      RnnRef ref = recurrent_ref("lstm", x, lstm.state_dict(), 2, bidirectional, 4);
      expect_close(batch_first ? out.transpose(0, 1) : out, ref.out, 1e-5, 1e-5);
      expect_close(hn, joined(ref.hn), 1e-5, 1e-5);
      expect_close(cn, joined(ref.cn), 1e-5, 1e-5);
      EXPECT_EQ(hn.shape(), (Dims{bidirectional ? 4 : 2, 2, 4}));
    }
}

TEST(GRU, MatchesTheRecurrence) {
  nn::GRU gru(3, 5, {.num_layers = 2, .bidirectional = true});
  Tensor x = randn({4, 3, 3});
  auto [out, hn] = gru(x);
  RnnRef ref = recurrent_ref("gru", x, gru.state_dict(), 2, true, 5);
  expect_close(out, ref.out, 1e-5, 1e-5);
  expect_close(hn, joined(ref.hn), 1e-5, 1e-5);
  EXPECT_EQ(out.shape(), (Dims{4, 3, 10}));
}

TEST(LSTM, CarriesStatesAndTakesUnbatchedInput) {
  nn::LSTM lstm(3, 4);
  Tensor x = randn({6, 2, 3});
  // Two halves with the state carried equal the whole sequence.
  auto [whole, hc] = lstm(x);
  auto [first, hc1] = lstm(x.slice(0, 0, 3));
  auto [second, hc2] = lstm(x.slice(0, 3, 6), hc1);
  expect_close(cat({first, second}, 0), whole.to_vector<double>(), 1e-6, 1e-6);
  expect_close(std::get<1>(hc2), std::get<1>(hc).to_vector<double>(), 1e-6, 1e-6);
  // Unbatched: [T, in] is batch 1 without its dim.
  auto [u, uhc] = lstm(x.select(1, 1));
  EXPECT_EQ(u.shape(), (Dims{6, 4}));
  EXPECT_EQ(std::get<0>(uhc).shape(), (Dims{1, 4}));
  expect_close(u, whole.select(1, 1).contiguous().to_vector<double>(), 1e-6, 1e-6);
  // The cell is one step of the layer.
  nn::LSTMCell cell(3, 4);
  cell.load_state_dict({{"weight_ih", lstm.state_dict().at("weight_ih_l0")},
                        {"weight_hh", lstm.state_dict().at("weight_hh_l0")},
                        {"bias_ih", lstm.state_dict().at("bias_ih_l0")},
                        {"bias_hh", lstm.state_dict().at("bias_hh_l0")}});
  auto [h1, c1] = cell(x.select(0, 0));
  expect_close(h1, first.select(0, 0).contiguous().to_vector<double>(), 1e-6, 1e-6);
  nn::GRU gru(3, 4);
  nn::GRUCell gcell(3, 4);
  gcell.load_state_dict({{"weight_ih", gru.state_dict().at("weight_ih_l0")},
                         {"weight_hh", gru.state_dict().at("weight_hh_l0")},
                         {"bias_ih", gru.state_dict().at("bias_ih_l0")},
                         {"bias_hh", gru.state_dict().at("bias_hh_l0")}});
  expect_close(gcell(x.select(0, 0)), std::get<0>(gru(x.slice(0, 0, 1))).select(0, 0).contiguous().to_vector<double>(),
               1e-6, 1e-6);
}

TEST(LSTM, HasTorchsNamesAndDifferentiates) {
  nn::LSTM lstm(2, 3, {.num_layers = 2, .bidirectional = true});
  std::vector<std::string> names;
  for (auto& [n, t] : lstm.named_parameters()) names.push_back(n);
  ASSERT_EQ(names.size(), 16u);
  EXPECT_EQ(names[0], "weight_ih_l0");
  EXPECT_EQ(names[5], "weight_hh_l0_reverse");
  EXPECT_EQ(lstm.state_dict().at("weight_ih_l1").shape(), (Dims{12, 6}));
  nn::LSTM small(2, 2);
  small.to(f64);
  // With respect to the input here; the weights' gradients are LibTorch's (tests/torch).
  Tensor x = randn({3, 1, 2}, f64).requires_grad_();
  EXPECT_EQ(autograd::gradcheck([&](std::span<const Tensor> in) { return std::get<0>(small(in[0])); },
                                std::vector<Tensor>{x}),
            "");
  jit::Function f = jit::trace([&](Tensor a) { return std::get<0>(small(a)); }, {x.detach()});
  expect_close(f(x.detach()), std::get<0>(small(x.detach())).to_vector<double>(), 1e-12, 1e-12);
  expect_error([&] { lstm(randn({4, 2, 5})); }, {"LSTM", "[T, N, 2]", "f32[4,2,5]"});
  expect_error(
      [&] {
        lstm(randn({4, 2, 2}), {zeros({2, 2, 3}), zeros({4, 2, 3})});
      },
      {"LSTM", "initial state", "[4,2,3]"});
}

// The rnn op (what a trace on CUDA records) names itself, the operand and what it expected.
TEST(RnnOp, RefusesOperandsThatDoNotFit) {
  Attrs a;
  a.lstm = true, a.hidden_size = 3, a.num_layers = 1;
  Tensor x = randn({4, 2, 5}), w_ih = randn({12, 5}), w_hh = randn({12, 3});
  EXPECT_EQ(apply(OpId::Rnn, {x, w_ih, w_hh}, a).shape(), (Dims{2, 4 * 3 + 2 * 3}));  // [N, T*H + 2*L*H]
  expect_error([&] { apply(OpId::Rnn, {x, randn({12, 4}), w_hh}, a); }, {"rnn", "param 0", "f32[12,5]", "f32[12,4]"});
  expect_error([&] { apply(OpId::Rnn, {x, w_ih}, a); }, {"rnn", "expected 2 params", "got 1"});
  expect_error([&] { apply(OpId::Rnn, {x, randn({1, 2, 3}), w_ih, w_hh}, a); }, {"rnn", "2 initial states", "got 1"});
  expect_error([&] { apply(OpId::Rnn, {x.to(DType::F16), w_ih, w_hh}, a); }, {"rnn", "f32 or f64", "f16[4,2,5]"});
  expect_error([&] { apply(OpId::Rnn, {randn({4, 5}), w_ih, w_hh}, a); }, {"rnn", "[T, N, input_size]"});
  Attrs huge = a;
  huge.hidden_size = int64_t{1} << 40;
  expect_error([&] { apply(OpId::Rnn, {x, w_ih, w_hh}, huge); }, {"rnn", "positive ints"});
  Tensor y = apply(OpId::Rnn, {x, w_ih, w_hh}, a);
  expect_error([&] { apply(OpId::RnnBackward, {x, w_ih, w_hh, y, randn({36})}, a); }, {"rnn_backward", "grad f32[36]"});
}
