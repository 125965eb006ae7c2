// tests/nn/attention_fused_test.cpp -- the fused attention op on the CPU (its blocked kernels)
// against its composite: every mask kind, causal, dropout, the dtypes, sequences of 1 to 1000
// and head dims 32 to 128; the dropout's mask is the one scaled_dot_product_attention drew
// before it was fused; traced steps keep the op and its backward; a second derivative goes
// through the composite's formulas. (tests/cuda/attention_test.cpp runs the same on CUDA.)
#include <gtest/gtest.h>

#include "jit/trace.h"
#include "tests/jit/jit_test_util.h"
#include "tests/nn/attention_cases.h"
#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::FusedAttentionCase;

TEST(FusedAttention, MatchesTheCompositeOnTheCpu) {
  const FusedAttentionCase cases[] = {
      {"plain_f32", f32, 2, 2, 7, 7, 32},
      {"causal_f32_e64", f32, 1, 2, 64, 64, 64, 0, true},
      {"bool_mask_f16", DType::F16, 2, 1, 7, 9, 64, 1},
      {"float_mask_bf16_e128", DType::BF16, 1, 2, 7, 5, 128, 2},
      {"dropout_f32", f32, 1, 2, 64, 33, 32, 0, false, 0.25},
      {"dropout_causal_f64", f64, 1, 1, 70, 70, 32, 0, true, 0.4},
      {"one_token", f32, 2, 2, 1, 1, 32},
      {"long_causal", f32, 1, 1, 1000, 1000, 32, 0, true},
  };
  for (const FusedAttentionCase& c : cases) test::expect_fused_matches_composite(c, cpu, test::fused_rtol(c.dtype));
}

// The mask scaled_dot_product_attention drew as a composite (softmax, then nn::dropout) is the
// fused op's: the same generator state gives the same output.
TEST(FusedAttention, DropoutDrawsTheCompositesMask) {
  Tensor q = randn({2, 3, 5, 8}), k = randn({2, 3, 6, 8}), v = randn({2, 3, 6, 4});
  manual_seed(7);
  Attrs a;
  a.scale = 1 / std::sqrt(8.0), a.dropout_p = 0.3;
  Tensor fused = apply(OpId::Attention, {q, k, v, random_state(attention::dropout_counters({6, 5, 6, 8, 4}))}, a);
  int64_t after = random_state(0).to_vector<int64_t>()[1];
  manual_seed(7);
  Tensor w = softmax(matmul(q, k.transpose(-2, -1)) * (1 / std::sqrt(8.0)), -1);
  Tensor composite = matmul(nn::dropout(w, 0.3, true), v);
  test::expect_close(fused, composite.to_vector<double>(), 1e-5, 1e-6);
  // And the generator moved past the same counters.
  EXPECT_EQ(random_state(0).to_vector<int64_t>()[1], after);
}

// Short sequences on the CPU take the composite (attention::fused_on); from 2^20 weights per
// head, the op.
TEST(FusedAttention, TheCpuTakesTheOpForLongSequences) {
  auto traced_text = [&](int64_t t) {
    Tensor qt = randn({1, 2, t, 8});
    jit::Function f = jit::trace([](Tensor a, Tensor b, Tensor c) { return nn::scaled_dot_product_attention(a, b, c); },
                                 {qt, randn({1, 2, t, 8}), randn({1, 2, t, 8})});
    return test::text_of(f.graph());
  };
  EXPECT_EQ(traced_text(64).find(" = attention "), std::string::npos);
  EXPECT_NE(traced_text(1024).find(" = attention "), std::string::npos);
}

TEST(FusedAttention, TracedStepsKeepTheOpAndItsBackward) {
  Tensor q = randn({1, 2, 1024, 4}).requires_grad_(), k = randn({1, 2, 1024, 4}).requires_grad_(),
         v = randn({1, 2, 1024, 4}).requires_grad_();
  auto step = [](Tensor a, Tensor b, Tensor c) {
    Tensor y = nn::scaled_dot_product_attention(a, b, c, {}, 0, true);
    return sum(y * y);
  };
  jit::Function f = jit::trace(step, {q, k, v});
  Tensor loss = f(q, k, v);
  loss.backward();
  std::vector<Tensor> traced = {q.grad(), k.grad(), v.grad()};
  for (Tensor* t : {&q, &k, &v}) t->set_grad({});
  Tensor eager = step(q, k, v);
  eager.backward();
  test::expect_close(loss, eager.to_vector<double>(), 1e-5, 1e-5);
  test::expect_close(traced[0], q.grad().to_vector<double>(), 1e-5, 1e-5);
  test::expect_close(traced[2], v.grad().to_vector<double>(), 1e-5, 1e-5);
  std::string text = test::text_of(f.graph());
  EXPECT_NE(text.find(" = attention "), std::string::npos) << text;
}

TEST(FusedAttention, SecondDerivativeGoesThroughTheComposite) {
  Tensor q = randn({1, 3, 4}, f64).requires_grad_(), k = randn({1, 5, 4}, f64).requires_grad_(),
         v = randn({1, 5, 2}, f64).requires_grad_();
  auto first = [](std::span<const Tensor> in) {
    Tensor y = nn::scaled_dot_product_attention(in[0], in[1], in[2]);
    Tensor outs[] = {sum(y * y)};
    std::vector<Tensor> g = autograd::grad(outs, in, {}, true, true);
    return sum(g[0] * g[0]) + sum(g[1] * g[2].sum());
  };
  EXPECT_EQ(autograd::gradcheck(first, std::vector<Tensor>{q, k, v}), "");
}

TEST(FusedAttention, RefusesWhatItCannotTake) {
  Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 6});
  Attrs a;
  a.scale = 0.5;
  test::expect_error(
      [&] {
        apply(OpId::Attention, {q, k, randn({3, 5, 6})}, a);
      },
      {"attention", "f32[2,3,4]", "f32[3,5,6]", "batch dims"});
  test::expect_error(
      [&] {
        apply(OpId::Attention, {q, k, v, randn({4, 5})}, a);
      },
      {"attention", "mask f32[4,5]", "[2,3,5]"});
  test::expect_error([&] { apply(OpId::Attention, {q, k.to(f64), v}, a); }, {"attention", "float dtype"});
  Attrs causal = a;
  causal.causal = true;
  test::expect_error(
      [&] {
        apply(OpId::Attention, {q, k, v, ones({3, 5}, DType::Bool)}, causal);
      },
      {"attention", "not both"});
  Attrs drop = a;
  drop.dropout_p = 0.5;
  test::expect_error([&] { apply(OpId::Attention, {q, k, v}, drop); }, {"attention", "generator state", "got 3"});
  // An empty key set gives zeros, as the composite's empty sum does; no queries, nothing.
  Tensor none = apply(OpId::Attention, {q, zeros({2, 0, 4}), zeros({2, 0, 6})}, a);
  test::expect_close(none, std::vector<double>(36, 0.0), 0, 0);
  EXPECT_EQ(apply(OpId::Attention, {zeros({2, 0, 4}), k, v}, a).shape(), (Dims{2, 0, 6}));
}
