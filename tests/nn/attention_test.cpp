// tests/nn/attention_test.cpp -- scaled_dot_product_attention and MultiheadAttention against
// attention written out here in double loops: masks of both kinds and conventions, causal,
// scale, key padding, averaged weights, batch_first, gradients by finite differences, traced
// against eager, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

// Row-major [B, L, E] x [B, S, E] x [B, S, Dv] -> [B, L, Dv]; allowed(b, i, j) and bias(b, i, j)
// give the mask, weights (if asked) [B, L, S].
std::vector<double> attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                  const std::function<bool(int64_t, int64_t, int64_t)>& allowed,
                                  const std::function<double(int64_t, int64_t, int64_t)>& bias,
                                  std::vector<double>* weights = nullptr) {
  int64_t b = q.shape()[0], l = q.shape()[1], e = q.shape()[2], s = k.shape()[1], dv = v.shape()[2];
  std::vector<double> Q = q.contiguous().to_vector<double>(), K = k.contiguous().to_vector<double>(),
                      V = v.contiguous().to_vector<double>(), out;
  for (int64_t n = 0; n < b; ++n)
    for (int64_t i = 0; i < l; ++i) {
      std::vector<double> sc(static_cast<size_t>(s));
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < e; ++c) dot += Q[size_t((n * l + i) * e + c)] * K[size_t((n * s + j) * e + c)];
        sc[size_t(j)] = allowed(n, i, j) ? dot * scale + bias(n, i, j) : -std::numeric_limits<double>::infinity();
        mx = std::max(mx, sc[size_t(j)]);
      }
      double z = 0;
      for (double& x : sc) z += (x = std::exp(x - mx));
      for (double& x : sc) x /= z;
      if (weights) weights->insert(weights->end(), sc.begin(), sc.end());
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < s; ++j) acc += sc[size_t(j)] * V[size_t((n * s + j) * dv + c)];
        out.push_back(acc);
      }
    }
  return out;
}

auto all_allowed = [](int64_t, int64_t, int64_t) { return true; };
auto no_bias = [](int64_t, int64_t, int64_t) { return 0.0; };

}  // namespace

TEST(ScaledDotProductAttention, MatchesTheFormulaWithEveryMask) {
  Tensor q = randn({2, 3, 4}, f64), k = randn({2, 5, 4}, f64), v = randn({2, 5, 6}, f64);
  expect_close(nn::scaled_dot_product_attention(q, k, v), attention_ref(q, k, v, 0.5, all_allowed, no_bias), 1e-12,
               1e-12);
  expect_close(nn::scaled_dot_product_attention(q, k, v, {}, 0, false, 0.3),
               attention_ref(q, k, v, 0.3, all_allowed, no_bias), 1e-12, 1e-12);
  Tensor keep = lt(rand({3, 5}), 0.7);
  keep = logical_or(keep, eq(arange(0, 5, 1, DType::I64).reshape({1, 5}), 0));  // each query sees one key
  std::vector<double> kv = keep.to_vector<double>();
  expect_close(nn::scaled_dot_product_attention(q, k, v, keep),
               attention_ref(
                   q, k, v, 0.5, [&](int64_t, int64_t i, int64_t j) { return kv[size_t(i * 5 + j)] != 0; }, no_bias),
               1e-12, 1e-12);
  Tensor add = randn({2, 3, 5}, f64);
  std::vector<double> av = add.to_vector<double>();
  expect_close(nn::scaled_dot_product_attention(q, k, v, add),
               attention_ref(q, k, v, 0.5, all_allowed,
                             [&](int64_t n, int64_t i, int64_t j) { return av[size_t((n * 3 + i) * 5 + j)]; }),
               1e-12, 1e-12);
  expect_close(nn::scaled_dot_product_attention(q, k, v, {}, 0, true),
               attention_ref(
                   q, k, v, 0.5, [](int64_t, int64_t i, int64_t j) { return j <= i; }, no_bias),
               1e-12, 1e-12);
}

TEST(ScaledDotProductAttention, DifferentiatesAndTraces) {
  Tensor q = randn({2, 3, 4}, f64).requires_grad_(), k = randn({2, 3, 4}, f64).requires_grad_(),
         v = randn({2, 3, 2}, f64).requires_grad_();
  auto fn = [](std::span<const Tensor> in) {
    return nn::scaled_dot_product_attention(in[0], in[1], in[2], {}, 0, true);
  };
  EXPECT_EQ(autograd::gradcheck(fn, std::vector<Tensor>{q, k, v}), "");
  jit::Function f =
      jit::trace([](Tensor a, Tensor b, Tensor c) { return nn::scaled_dot_product_attention(a, b, c, {}, 0, true); },
                 {q.detach(), k.detach(), v.detach()});
  expect_close(f(q.detach(), k.detach(), v.detach()),
               nn::scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), {}, 0, true).to_vector<double>(),
               1e-12, 1e-12);
  expect_error(
      [&] {
        nn::scaled_dot_product_attention(q, k, v, ones({3, 3}, DType::Bool), 0, true);
      },
      {"scaled_dot_product_attention", "not both"});
  expect_error(
      [&] {
        nn::scaled_dot_product_attention(q, randn({2, 3, 5}, f64), v);
      },
      {"scaled_dot_product_attention", "f64[2,3,4]", "f64[2,3,5]"});
}

TEST(MultiheadAttention, MatchesProjectedAttentionPerHead) {
  for (bool batch_first : {false, true}) {
    SCOPED_TRACE(batch_first);
    nn::MultiheadAttention mha(8, 2, {.batch_first = batch_first});
    mha.in_proj_bias.detach().copy_(randn({24}));
    mha.out_proj.bias.detach().copy_(randn({8}));
    int64_t n = 2, l = 3, s = 4;
    Tensor q = randn({n, l, 8}), kv = randn({n, s, 8});
    Tensor pad = zeros({n, s}, DType::Bool);
    pad.select(0, 1).select(0, 3).fill_(true);  // sample 1 ignores its last key
    auto arrange = [&](const Tensor& t) { return batch_first ? t : t.transpose(0, 1).contiguous(); };
    auto [out, w] = mha(arrange(q), arrange(kv), arrange(kv), pad);
    // The reference: per head, project with the slices of in_proj, attend, concatenate, project.
    Tensor W = mha.in_proj_weight.detach().to(f64), B = mha.in_proj_bias.detach().to(f64);
    std::vector<double> heads(static_cast<size_t>(n * l * 8)), mean_w(static_cast<size_t>(n * l * s));
    for (int64_t h = 0; h < 2; ++h) {
      auto proj = [&](const Tensor& x, int64_t part) {
        int64_t r = part * 8 + h * 4;
        return matmul(x.to(f64), W.slice(0, r, r + 4).t()) + B.slice(0, r, r + 4);
      };
      std::vector<double> wh;
      std::vector<double> o = attention_ref(
          proj(q, 0), proj(kv, 1), proj(kv, 2), 0.5, [&](int64_t b, int64_t, int64_t j) { return !(b == 1 && j == 3); },
          no_bias, &wh);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < l; ++i)
          for (int64_t c = 0; c < 4; ++c) heads[size_t((b * l + i) * 8 + h * 4 + c)] = o[size_t((b * l + i) * 4 + c)];
      for (size_t i = 0; i < wh.size(); ++i) mean_w[i] += wh[i] / 2;
    }
    Tensor want = matmul(from_vector(heads, {n, l, 8}), mha.out_proj.weight.detach().to(f64).t()) +
                  mha.out_proj.bias.detach().to(f64);
    expect_close(batch_first ? out : out.transpose(0, 1), want.contiguous().to_vector<double>(), 1e-5, 1e-5);
    expect_close(w, mean_w, 1e-5, 1e-5);
    EXPECT_EQ(w.shape(), (Dims{n, l, s}));
  }
}

TEST(MultiheadAttention, HasTorchsParameterNamesAndRefusesBadMasks) {
  nn::MultiheadAttention mha(6, 3);
  std::vector<std::string> names;
  for (auto& [n, t] : mha.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  expect_close(mha.in_proj_bias, std::vector<double>(18, 0.0), 0, 0);
  Tensor x = randn({4, 2, 6});
  auto [o, w] = mha(x, x, x, {}, false);
  EXPECT_FALSE(w.defined());
  EXPECT_EQ(o.shape(), (Dims{4, 2, 6}));
  // A causal float mask and the causal flag agree.
  Tensor causal = masked_fill(zeros({4, 4}), logical_not(tril(ones({4, 4}, DType::Bool))), -1e30);
  auto [oc, wc] = mha.forward(x, x, x, {}, true, causal);
  auto [of, wf] = mha.forward(x, x, x, {}, true, {}, true, true);
  expect_close(of, oc.to_vector<double>(), 1e-6, 1e-6);
  expect_error(
      [&] {
        mha(x, x, x, {}, true, ones({3, 3}, DType::Bool));
      },
      {"MultiheadAttention", "attn_mask", "[4,4]"});
  expect_error([&] { mha(randn({4, 2, 5}), x, x); }, {"MultiheadAttention", "ending in 6", "f32[4,2,5]"});
  expect_error([] { nn::MultiheadAttention(10, 3); }, {"MultiheadAttention", "multiple of num_heads 3"});
}

// need_weights = false takes the fused op, with attn_mask, key_padding_mask and is_causal made
// one mask: the same outputs as the path that returns the weights.
TEST(MultiheadAttention, FastPathMatchesTheWeightsPath) {
  nn::MultiheadAttention mha(8, 2, {.batch_first = true});
  int64_t n = 2, l = 4, s = 4;
  Tensor x = randn({n, l, 8});
  Tensor pad = zeros({n, s}, DType::Bool);
  pad.select(0, 0).select(0, 2).fill_(true);
  Tensor banned = logical_and(rand({l, s}) < 0.3, ne(arange(0, s, 1, DType::I64), 0));  // key 0 stays allowed
  Tensor bias = randn({n * 2, l, s});
  struct Masks {
    const char* name;
    Tensor attn, padding;
    bool causal;
  };
  for (const Masks& m : {Masks{"none", {}, {}, false}, Masks{"causal_and_padding", {}, pad, true},
                         Masks{"bool_and_padding", banned, pad, false}, Masks{"float_and_padding", bias, pad, false}}) {
    SCOPED_TRACE(m.name);
    auto [slow, w] = mha.forward(x, x, x, m.padding, true, m.attn, true, m.causal);
    auto [fast, none] = mha.forward(x, x, x, m.padding, false, m.attn, true, m.causal);
    EXPECT_FALSE(none.defined());
    expect_close(fast, slow.to_vector<double>(), 1e-5, 1e-5);
  }
}
