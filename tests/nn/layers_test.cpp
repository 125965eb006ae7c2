// tests/nn/layers_test.cpp -- the standard layers against direct functional calls and loop
// references computed here in double, their PyTorch-style initialization, dropout, the init
// functions' distributions, and Embedding's padding row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

struct Moments {
  double mean, std, min, max;
};
Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double s = 0, s2 = 0, lo = v[0], hi = v[0];
  for (double x : v) s += x, s2 += x * x, lo = std::min(lo, x), hi = std::max(hi, x);
  double n = static_cast<double>(v.size()), mean = s / n;
  return {mean, std::sqrt(s2 / n - mean * mean), lo, hi};
}

}  // namespace

TEST(Layers, LinearComputesXWTransposePlusB) {
  manual_seed(10);
  nn::Linear lin(3, 2);
  EXPECT_EQ(lin.weight.shape(), (Dims{2, 3}));
  EXPECT_EQ(lin.bias.shape(), (Dims{2}));
  Tensor x = randn({4, 3});
  Tensor y = lin(x);
  ASSERT_EQ(y.shape(), (Dims{4, 2}));
  std::vector<double> xv = x.to_vector<double>(), w = lin.weight.to_vector<double>(), b = lin.bias.to_vector<double>(),
                      want;
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 2; ++o) {
      double acc = b[o];
      for (int i = 0; i < 3; ++i) acc += xv[n * 3 + i] * w[o * 3 + i];
      want.push_back(acc);
    }
  expect_close(y, want, 1e-5, 1e-5);
  EXPECT_TRUE(allclose(y, linear(x, lin.weight, lin.bias), 0, 0));
  // Leading batch dims pass through.
  Tensor x3 = randn({2, 5, 3});
  EXPECT_EQ(lin(x3).shape(), (Dims{2, 5, 2}));
  EXPECT_TRUE(allclose(lin(x3).reshape({10, 2}), lin(x3.reshape({10, 3})), 1e-6, 1e-6));
  nn::Linear nobias(3, 2, false);
  EXPECT_FALSE(nobias.bias.defined());
  EXPECT_EQ(nobias.parameters().size(), 1u);
  expect_error([] { nn::Linear(0, 2); }, {"Linear", "positive"});
}

TEST(Layers, LinearInitStaysWithinOneOverSqrtIn) {
  manual_seed(11);
  nn::Linear lin(400, 300);
  double bound = 1 / std::sqrt(400.0);
  Moments w = moments(lin.weight), b = moments(lin.bias);
  EXPECT_GE(w.min, -bound);
  EXPECT_LE(w.max, bound);
  EXPECT_GE(b.min, -bound);
  EXPECT_LE(b.max, bound);
  // Uniform over the whole range: std bound/sqrt(3), extremes near the bounds.
  EXPECT_NEAR(w.std, bound / std::sqrt(3.0), 0.02 * bound);
  EXPECT_NEAR(w.mean, 0, 0.01 * bound);
  EXPECT_GT(w.max, 0.99 * bound);
  EXPECT_LT(w.min, -0.99 * bound);
  EXPECT_GT(b.max, 0.8 * bound);
}

TEST(Layers, Conv2dMatchesALoopReference) {
  manual_seed(12);
  nn::Conv2d conv(2, 3, {3, 2}, {.stride = {2, 1}, .padding = {1, 0}});
  EXPECT_EQ(conv.weight.shape(), (Dims{3, 2, 3, 2}));
  Tensor x = randn({2, 2, 5, 4});
  Tensor y = conv(x);
  const int N = 2, C = 2, H = 5, W = 4, O = 3, KH = 3, KW = 2;
  const int OH = (H + 2 - KH) / 2 + 1, OW = (W - KW) / 1 + 1;
  ASSERT_EQ(y.shape(), (Dims{N, O, OH, OW}));
  std::vector<double> xv = x.to_vector<double>(), w = conv.weight.to_vector<double>(),
                      b = conv.bias.to_vector<double>(), want;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          double acc = b[o];
          for (int c = 0; c < C; ++c)
            for (int kh = 0; kh < KH; ++kh)
              for (int kw = 0; kw < KW; ++kw) {
                int ih = oh * 2 - 1 + kh, iw = ow + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[((n * C + c) * H + ih) * W + iw] * w[((o * C + c) * KH + kh) * KW + kw];
              }
          want.push_back(acc);
        }
  expect_close(y, want, 1e-5, 1e-5);
  EXPECT_TRUE(allclose(y, conv2d(x, conv.weight, conv.bias, {2, 1}, {1, 0}), 0, 0));
}

TEST(Layers, Conv2dGroupsShapeTheWeightAndInit) {
  manual_seed(13);
  nn::Conv2d conv(4, 6, {3, 3}, {.groups = 2});
  EXPECT_EQ(conv.weight.shape(), (Dims{6, 2, 3, 3}));
  double bound = 1 / std::sqrt(2.0 * 9);  // fan_in = in/groups * kh * kw
  Moments w = moments(conv.weight), b = moments(conv.bias);
  EXPECT_LE(std::max(-w.min, w.max), bound);
  EXPECT_LE(std::max(-b.min, b.max), bound);
  Tensor x = randn({1, 4, 5, 5});
  EXPECT_TRUE(allclose(conv(x), conv2d(x, conv.weight, conv.bias, {1, 1}, {0, 0}, {1, 1}, 2), 0, 0));
  nn::Conv2d nobias(4, 6, {1, 1}, {.bias = false});
  EXPECT_FALSE(nobias.bias.defined());
  expect_error([] { nn::Conv2d(4, 6, {3, 3}, {.groups = 3}); }, {"Conv2d", "groups 3"});
  expect_error([] { nn::Conv2d(4, 6, {3}); }, {"Conv2d", "kernel"});
}

TEST(Layers, EmbeddingPicksRows) {
  manual_seed(14);
  nn::Embedding emb(5, 3);
  Tensor idx = from_vector<int64_t>({4, 0, 4, 2, 1, 3}, {2, 3});
  Tensor y = emb(idx);
  ASSERT_EQ(y.shape(), (Dims{2, 3, 3}));
  std::vector<double> w = emb.weight.to_vector<double>(), want;
  for (int64_t i : idx.to_vector<int64_t>())
    for (int d = 0; d < 3; ++d) want.push_back(w[i * 3 + d]);
  expect_close(y, want, 0);
  // Repeated rows accumulate their gradients.
  y.sum().backward();
  expect_close(emb.weight.grad(), {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2}, 0);
  expect_error([&] { emb(from_vector<int64_t>({5})); }, {});
  nn::Embedding big(1000, 100);
  Moments m = moments(big.weight);  // normal(0, 1)
  EXPECT_NEAR(m.mean, 0, 0.02);
  EXPECT_NEAR(m.std, 1, 0.02);
}

TEST(Layers, LayerNormNormalizesTheTrailingDims) {
  nn::LayerNorm ln({2, 3});
  expect_close(ln.weight, {1, 1, 1, 1, 1, 1}, 0);
  expect_close(ln.bias, {0, 0, 0, 0, 0, 0}, 0);
  {
    NoGradGuard no_grad;
    ln.weight.copy_(from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
    ln.bias.fill_(0.5);
  }
  manual_seed(15);
  Tensor x = randn({4, 2, 3}) * 3.0 + 1.0;
  Tensor y = ln(x);
  std::vector<double> xv = x.to_vector<double>(), want;
  for (int r = 0; r < 4; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 6; ++i) m += xv[r * 6 + i] / 6;
    for (int i = 0; i < 6; ++i) v += (xv[r * 6 + i] - m) * (xv[r * 6 + i] - m) / 6;
    for (int i = 0; i < 6; ++i) want.push_back((xv[r * 6 + i] - m) / std::sqrt(v + 1e-5) * (i + 1) + 0.5);
  }
  expect_close(y, want, 1e-5, 1e-5);
  EXPECT_TRUE(allclose(y, layer_norm(x, {2, 3}, ln.weight, ln.bias), 0, 0));
  nn::LayerNorm plain({3}, 1e-5, /*elementwise_affine=*/false);
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_TRUE(allclose(plain(x), layer_norm(x, {3}), 0, 0));
}

TEST(Layers, PoolsMatchTheFunctionalsAndALoopReference) {
  Tensor x = from_vector<float>({1, 5, 2, 0,  //
                                 3, 4, 8, 1,  //
                                 0, 2, 6, 7,  //
                                 9, 1, 3, 2},
                                {1, 1, 4, 4});
  nn::MaxPool2d mp({2, 2});
  expect_close(mp(x), {5, 8, 9, 7}, 0);
  nn::AvgPool2d ap({2, 2});
  expect_close(ap(x), {13 / 4.0, 11 / 4.0, 12 / 4.0, 18 / 4.0}, 1e-6);
  nn::MaxPool2d mp3({3, 3}, {1, 1}, {1, 1});
  EXPECT_TRUE(allclose(mp3(x), max_pool2d(x, {3, 3}, {1, 1}, {1, 1}), 0, 0));
  expect_close(mp3(x).slice(2, 0, 1), {5, 8, 8, 8}, 0);
  nn::AvgPool2d ap3({3, 3}, {2, 2}, {1, 1}, /*count_include_pad=*/false);
  EXPECT_TRUE(allclose(ap3(x), avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false), 0, 0));
  // Window at (0, 0) covers rows 0-1, cols 0-1 of the input (the rest is padding).
  EXPECT_NEAR(ap3(x).to_vector<double>()[0], (1 + 5 + 3 + 4) / 4.0, 1e-6);
  nn::MaxPool2d ceil({3, 3}, {2, 2}, {0, 0}, /*ceil_mode=*/true);
  EXPECT_EQ(ceil(x).shape(), (Dims{1, 1, 2, 2}));
  expect_close(ceil(x), {8, 8, 9, 7}, 0);
}

TEST(Layers, ActivationsAndFlattenMatchTheirFunctions) {
  Tensor x = randn({2, 3, 4});
  EXPECT_TRUE(allclose(nn::ReLU()(x), relu(x), 0, 0));
  EXPECT_TRUE(allclose(nn::GELU()(x), gelu(x), 0, 0));
  EXPECT_TRUE(allclose(nn::GELU("tanh")(x), gelu(x, "tanh"), 0, 0));
  EXPECT_TRUE(allclose(nn::SiLU()(x), silu(x), 0, 0));
  EXPECT_TRUE(allclose(nn::Sigmoid()(x), sigmoid(x), 0, 0));
  EXPECT_TRUE(allclose(nn::Tanh()(x), tanh(x), 0, 0));
  EXPECT_EQ(nn::Flatten()(x).shape(), (Dims{2, 12}));
  EXPECT_EQ(nn::Flatten(0, 1)(x).shape(), (Dims{6, 4}));
}

TEST(Layers, DropoutInEvalIsTheIdentity) {
  nn::Dropout drop(0.3);
  drop.eval();
  Tensor x = randn({1000});
  EXPECT_TRUE(allclose(drop(x), x, 0, 0));
  EXPECT_TRUE(allclose(nn::dropout(x, 0.9, false), x, 0, 0));
  EXPECT_TRUE(allclose(nn::dropout(x, 0.0, true), x, 0, 0));
}

TEST(Layers, DropoutInTrainZeroesAboutPAndScalesTheRest) {
  manual_seed(16);
  for (double p : {0.1, 0.5, 0.8}) {
    nn::Dropout drop(p);
    const int n = 200000;
    Tensor x = full({n}, 2.0);
    std::vector<double> y = drop(x).to_vector<double>();
    int zeros = 0;
    for (double v : y) {
      if (v == 0) ++zeros;
      else EXPECT_NEAR(v, 2.0 / (1 - p), 1e-5) << "p " << p;
    }
    // Binomial(n, p): 5 standard deviations.
    double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(zeros, n * p, 5 * sd) << "p " << p;
  }
  // The gradient flows only through the kept elements, scaled the same way.
  Tensor x = ones({10000}).requires_grad_();
  Tensor y = nn::dropout(x, 0.5, true);
  y.sum().backward();
  EXPECT_TRUE(allclose(x.grad(), y.detach(), 0, 0));
  expect_error([] { nn::Dropout(1.0); }, {"Dropout", "[0, 1)"});
}

TEST(Init, KaimingAndXavierHaveTheRightSpread) {
  manual_seed(17);
  Tensor w = empty({256, 1024});
  const double fan_in = 1024, fan_out = 256;
  nn::kaiming_normal_(w);
  Moments m = moments(w);
  EXPECT_NEAR(m.mean, 0, 0.005);
  EXPECT_NEAR(m.std, std::sqrt(2 / fan_in), 0.02 * std::sqrt(2 / fan_in));
  nn::kaiming_normal_(w, 0, "fan_out");
  EXPECT_NEAR(moments(w).std, std::sqrt(2 / fan_out), 0.02 * std::sqrt(2 / fan_out));
  nn::kaiming_uniform_(w);
  m = moments(w);
  double bound = std::sqrt(6 / fan_in);
  EXPECT_GE(m.min, -bound);
  EXPECT_LE(m.max, bound);
  EXPECT_NEAR(m.std, std::sqrt(2 / fan_in), 0.02 * std::sqrt(2 / fan_in));
  nn::kaiming_uniform_(w, std::sqrt(5.0));  // leaky slope a: gain sqrt(2 / (1 + a^2))
  EXPECT_LE(moments(w).max, std::sqrt(2.0 / 6) * std::sqrt(3 / fan_in));
  nn::xavier_uniform_(w);
  m = moments(w);
  double xb = std::sqrt(6 / (fan_in + fan_out));
  EXPECT_GE(m.min, -xb);
  EXPECT_LE(m.max, xb);
  EXPECT_NEAR(m.std, std::sqrt(2 / (fan_in + fan_out)), 0.02 * std::sqrt(2 / (fan_in + fan_out)));
  nn::xavier_normal_(w, 2.0);
  EXPECT_NEAR(moments(w).std, 2 * std::sqrt(2 / (fan_in + fan_out)), 0.04 * std::sqrt(2 / (fan_in + fan_out)));
}

TEST(Init, FansCountTheReceptiveField) {
  Tensor conv = empty({8, 4, 3, 5});
  auto [in, out] = nn::fans(conv);
  EXPECT_EQ(in, 4 * 15);
  EXPECT_EQ(out, 8 * 15);
  expect_error([] { nn::fans(empty({5})); }, {"init", "rank >= 2", "f32[5]"});
  Tensor w = empty({4, 4});
  expect_error([&] { nn::kaiming_uniform_(w, 0, "fan_avg"); }, {"init", "fan_avg"});
}

TEST(Init, FillersWorkOnParametersThatRequireGrad) {
  Tensor p = empty({3, 2}, f64).requires_grad_();
  nn::constant_(p, 0.25);
  expect_close(p, std::vector<double>(6, 0.25), 0);
  nn::zeros_(p);
  expect_close(p, std::vector<double>(6, 0), 0);
  nn::ones_(p);
  expect_close(p, std::vector<double>(6, 1), 0);
  nn::uniform_(p, 2, 3);
  Moments m = moments(p);
  EXPECT_GE(m.min, 2);
  EXPECT_LT(m.max, 3);
  nn::normal_(p, 5, 0);
  expect_close(p, std::vector<double>(6, 5), 0);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
}

TEST(Embedding, APaddingRowStartsAtZeroAndGetsNoGradient) {
  nn::Embedding e(5, 3, 1);
  expect_close(e.weight.select(0, 1).contiguous(), {0, 0, 0}, 0, 0);
  nn::Embedding last(5, 3, -1);
  expect_close(last.weight.select(0, 4).contiguous(), {0, 0, 0}, 0, 0);
  Tensor ids = from_vector(std::vector<int64_t>{1, 2, 1, 0}, {2, 2});
  Tensor out = e(ids);
  EXPECT_EQ(out.shape(), (Dims{2, 2, 3}));
  expect_close(out.select(0, 0).select(0, 1).contiguous(), e.weight.select(0, 2).contiguous().to_vector<double>(), 0,
               0);
  (out * 2.0).sum().backward();
  std::vector<double> g = e.weight.grad().to_vector<double>();
  std::vector<double> want{2, 2, 2, 0, 0, 0, 2, 2, 2, 0, 0, 0, 0, 0, 0};  // rows 0 and 2 read once; row 1 padding
  EXPECT_EQ(g, want);
  expect_error([] { nn::Embedding(5, 3, 5); }, {"Embedding", "padding_idx 5", "5 embeddings"});
}
