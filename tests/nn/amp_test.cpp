// tests/nn/amp_test.cpp -- autocast (runtime/autocast.h) and GradScaler (nn/amp.h): which ops
// compute in the low dtype and which in f32, their values beside the same ops on explicitly
// cast inputs, gradients in the inputs' dtypes, nesting and threads, a trace, training under
// bf16 beside f32, and the scaler skipping overflowed f16 steps and growing its scale back.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

TEST(Autocast, MatmulsGoLowAndReductionsAndLossesGoWide) {
  Tensor a = randn({4, 8}), b = randn({8, 3}), w = randn({3, 8}), bias = randn({3});
  Tensor img = randn({1, 2, 5, 5}), k = randn({4, 2, 3, 3});
  {
    AutocastGuard autocast(bf16);
    ASSERT_EQ(autocast_dtype(), bf16);
    Tensor m = matmul(a, b);
    EXPECT_EQ(m.dtype(), bf16);
    expect_close(m, matmul(a.to(bf16), b.to(bf16)).to_vector<double>(), 0, 0);
    EXPECT_EQ(linear(a, w, bias).dtype(), bf16);
    EXPECT_EQ(conv2d(img, k).dtype(), bf16);
    Tensor low = a.to(bf16);
    EXPECT_EQ(sum(low).dtype(), f32);
    EXPECT_EQ(mean(low, {1}).dtype(), f32);
    EXPECT_EQ(softmax(low, 1).dtype(), f32);
    EXPECT_EQ(log_softmax(low, 1).dtype(), f32);
    EXPECT_EQ(layer_norm(low, {8}).dtype(), f32);
    EXPECT_EQ(cumsum(low, 1).dtype(), f32);
    EXPECT_EQ(mse_loss(m, m).dtype(), f32);
    EXPECT_EQ(cross_entropy(m, from_vector(std::vector<int64_t>{0, 2, 1, 1})).dtype(), f32);
    expect_close(sum(low), {sum(low.to(f32)).item<double>()}, 0, 0);
    EXPECT_EQ((low * 2.0).dtype(), bf16);  // everything else: its inputs' dtype
    {
      AutocastGuard off(bf16, false);
      EXPECT_EQ(matmul(a, b).dtype(), f32);
    }
    EXPECT_EQ(matmul(a, b).dtype(), bf16);
    std::thread([&] { EXPECT_EQ(matmul(a, b).dtype(), f32); }).join();  // per thread
  }
  EXPECT_FALSE(autocast_dtype().has_value());
  EXPECT_EQ(matmul(a, b).dtype(), f32);
  expect_error([] { AutocastGuard bad(f64); }, {"autocast", "bf16 or f16", "f64"});
}

TEST(Autocast, GradientsComeBackInEachInputsDtypeAndTracesMatch) {
  nn::Linear fc(8, 3);
  Tensor x = randn({5, 8});
  Tensor loss;
  {
    AutocastGuard autocast(bf16);
    loss = cross_entropy(fc(x), from_vector(std::vector<int64_t>{0, 1, 2, 0, 1}));
  }
  loss.backward();  // outside the guard, as torch advises; inside it would be the same
  EXPECT_EQ(fc.weight.grad().dtype(), f32);
  // Beside f32's gradient, within bf16's rounding.
  Tensor w32 = fc.weight.detach().clone().requires_grad_(), b32 = fc.bias.detach().clone().requires_grad_();
  cross_entropy(linear(x, w32, b32), from_vector(std::vector<int64_t>{0, 1, 2, 0, 1})).backward();
  expect_close(fc.weight.grad(), w32.grad().to_vector<double>(), 2e-2, 2e-2);
  auto f = [&](Tensor in) {
    AutocastGuard autocast(bf16);
    return softmax(fc(in), 1);
  };
  jit::Function g = jit::trace(f, {x});
  Tensor traced = g(x), eager = f(x);
  EXPECT_EQ(traced.dtype(), f32);
  expect_close(traced, eager.to_vector<double>(), 1e-6, 1e-6);
}

TEST(Autocast, Bf16TrainingFollowsF32Training) {
  auto train = [](bool low) {
    manual_seed(3);
    nn::Sequential net;
    net.add<nn::Linear>(4, 16);
    net.add<nn::ReLU>();
    net.add<nn::Linear>(16, 1);
    optim::Adam opt(net.parameters(), 0.02);
    Tensor x = randn({64, 4}), y = sum(x * x, {1}, true);
    double last = 0;
    for (int s = 0; s < 60; ++s) {
      opt.zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(bf16, low);
        loss = mse_loss(net(x), y);
      }
      loss.backward();
      opt.step();
      last = loss.item<double>();
    }
    return last;
  };
  double f32_loss = train(false), bf16_loss = train(true);
  EXPECT_LT(bf16_loss, 0.5 * 4.8);  // well below the target's variance (about 4.8 at the start)
  EXPECT_NEAR(bf16_loss, f32_loss, 0.25 * f32_loss + 0.05);
}

TEST(GradScaler, SkipsOverflowedStepsAndGrowsItsScaleBack) {
  Tensor p = ones({3}, f16).requires_grad_();
  optim::SGD opt({p}, 0.1);
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
  // A clean step: the gradient is unscaled exactly (powers of two), then applied.
  scaler.scale((p * 3.0).sum()).backward();
  expect_close(p.grad(), {3072, 3072, 3072}, 0, 0);
  EXPECT_TRUE(scaler.step(opt));
  expect_close(p, {1 - 0.3, 1 - 0.3, 1 - 0.3}, 1e-3, 1e-3);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024);
  // An overflow in f16 (40000 x 1024 > 65504): the step is skipped and the scale halves.
  Tensor before = p.detach().clone();
  opt.zero_grad();
  scaler.scale((p * 40000.0).sum()).backward();
  EXPECT_FALSE(scaler.step(opt));
  expect_close(p, before.to_vector<double>(), 0, 0);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512);
  // Two clean steps in a row double it.
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    scaler.scale(p.sum()).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 1024);
  expect_error([&] { scaler.update(); }, {"GradScaler", "after step()"});
  amp::GradScaler off({.enabled = false});
  Tensor l = p.sum();
  EXPECT_EQ(off.scale(l).data_ptr(), l.data_ptr());
}
