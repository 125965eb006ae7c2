// tests/nn/norm_test.cpp -- BatchNorm1d/2d, GroupNorm and RMSNorm against references written
// here in double: batch and running statistics, momentum (and its cumulative form), eval,
// buffers in the state_dict, gradients by finite differences, a traced whole training step
// that updates the running statistics as the eager step does, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

// x [N, C, L...] as doubles: per channel, its values.
std::vector<std::vector<double>> by_channel(const Tensor& x) {
  int64_t n = x.shape()[0], c = x.shape()[1], l = x.numel() / std::max<int64_t>(n * c, 1);
  std::vector<double> v = x.contiguous().to_vector<double>();
  std::vector<std::vector<double>> out(static_cast<size_t>(c));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < l; ++j)
        out[static_cast<size_t>(ch)].push_back(v[static_cast<size_t>((i * c + ch) * l + j)]);
  return out;
}

struct Stats {
  std::vector<double> mean, var, unbiased;
};
Stats channel_stats(const Tensor& x) {
  Stats s;
  for (const auto& vals : by_channel(x)) {
    double m = 0, q = 0;
    for (double v : vals) m += v;
    m /= static_cast<double>(vals.size());
    for (double v : vals) q += (v - m) * (v - m);
    s.mean.push_back(m);
    s.var.push_back(q / static_cast<double>(vals.size()));
    s.unbiased.push_back(q / static_cast<double>(vals.size() - 1));
  }
  return s;
}

// (x - mean_c) / sqrt(var_c + eps) * w_c + b_c, row-major over x's shape.
std::vector<double> normalize_ref(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                                  const std::vector<double>& w, const std::vector<double>& b, double eps) {
  int64_t c = x.shape()[1], l = x.numel() / std::max<int64_t>(x.shape()[0] * c, 1);
  std::vector<double> v = x.contiguous().to_vector<double>(), out;
  for (size_t i = 0; i < v.size(); ++i) {
    size_t ch = static_cast<size_t>((static_cast<int64_t>(i) / l) % c);
    out.push_back((v[i] - mean[ch]) / std::sqrt(var[ch] + eps) * w[ch] + b[ch]);
  }
  return out;
}

std::vector<double> blend(const std::vector<double>& running, const std::vector<double>& batch, double m) {
  std::vector<double> out;
  for (size_t i = 0; i < running.size(); ++i) out.push_back((1 - m) * running[i] + m * batch[i]);
  return out;
}

}  // namespace

TEST(BatchNorm, TrainsOnBatchStatisticsAndUpdatesTheRunningOnes) {
  nn::BatchNorm2d bn(3);
  bn.weight.detach().copy_(randn({3}));
  bn.bias.detach().copy_(randn({3}));
  std::vector<double> w = bn.weight.to_vector<double>(), b = bn.bias.to_vector<double>();
  std::vector<double> rm(3, 0.0), rv(3, 1.0);
  for (int step = 0; step < 2; ++step) {
    Tensor x = randn({4, 3, 5, 2}) * 2.0 + 1.0;
    Stats s = channel_stats(x);
    expect_close(bn(x), normalize_ref(x, s.mean, s.var, w, b, 1e-5), 1e-5, 1e-5);
    rm = blend(rm, s.mean, 0.1);
    rv = blend(rv, s.unbiased, 0.1);  // the running variance is unbiased, as torch's
    expect_close(bn.running_mean, rm, 1e-6, 1e-6);
    expect_close(bn.running_var, rv, 1e-6, 1e-6);
  }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  // eval(): the running statistics, and no update.
  bn.eval();
  Tensor x = randn({2, 3, 4, 4});
  expect_close(bn(x), normalize_ref(x, rm, rv, w, b, 1e-5), 1e-5, 1e-5);
  expect_close(bn.running_mean, rm, 1e-6, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
}

// The statistics take one pass over x (sums shifted by a value of each channel): a mean 10^5
// times the spread keeps the variance's precision, as a two-pass variance would.
TEST(BatchNorm, StatisticsKeepTheirPrecisionWhenTheMeanDwarfsTheSpread) {
  nn::BatchNorm2d bn(3, {.momentum = 1.0, .affine = false});
  Tensor x = randn({8, 3, 6, 5}) * 0.01 + 1000.0;
  Stats s = channel_stats(x);
  expect_close(bn(x), normalize_ref(x, s.mean, s.var, {1, 1, 1}, {0, 0, 0}, 1e-5), 1e-2,
               0);  // (the f32 mean rounds by 3e-3 of the spread)
  expect_close(bn.running_mean, s.mean, 1e-9, 1e-6);
  expect_close(bn.running_var, s.unbiased, 1e-9, 1e-3);
}

TEST(BatchNorm, WithoutMomentumKeepsTheCumulativeAverage) {
  nn::BatchNorm1d bn(2, {.momentum = std::nullopt, .affine = false});
  std::vector<double> sum_m(2), sum_v(2);
  for (int step = 1; step <= 3; ++step) {
    Tensor x = randn({6, 2, 3}, f64) + static_cast<double>(step);
    Stats s = channel_stats(x);
    bn(x);
    for (size_t c = 0; c < 2; ++c) sum_m[c] += s.mean[c] / 3, sum_v[c] += s.unbiased[c] / 3;
  }
  expect_close(bn.running_mean, sum_m, 1e-6, 1e-6);
  expect_close(bn.running_var, sum_v, 1e-6, 1e-6);
  EXPECT_FALSE(bn.weight.defined());
}

TEST(BatchNorm, WithoutRunningStatisticsUsesTheBatchEvenInEval) {
  nn::BatchNorm1d bn(4, {.track_running_stats = false});
  bn.eval();
  Tensor x = randn({8, 4});
  Stats s = channel_stats(x);
  expect_close(bn(x), normalize_ref(x, s.mean, s.var, std::vector<double>(4, 1), std::vector<double>(4, 0), 1e-5), 1e-5,
               1e-5);
  auto sd = bn.state_dict();
  EXPECT_EQ(sd.size(), 2u);  // weight and bias
  nn::BatchNorm2d tracked(3);
  std::vector<std::string> names;
  for (auto& [n, t] : tracked.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"}));
  EXPECT_EQ(tracked.parameters().size(), 2u);
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  Tensor x = randn({3, 2, 4}, f64).requires_grad_(), w = randn({2}, f64).requires_grad_(),
         b = randn({2}, f64).requires_grad_();
  auto fn = [](std::span<const Tensor> in) { return nn::batch_norm(in[0], {}, {}, in[1], in[2], true); };
  EXPECT_EQ(autograd::gradcheck(fn, std::vector<Tensor>{x, w, b}), "");
  Tensor rm = randn({2}, f64), rv = rand({2}, f64) + 0.5;
  auto eval = [&](std::span<const Tensor> in) { return nn::batch_norm(in[0], rm, rv, in[1], in[2], false); };
  EXPECT_EQ(autograd::gradcheck(eval, std::vector<Tensor>{x, w, b}), "");
}

TEST(BatchNorm, ATracedWholeStepUpdatesTheRunningStatisticsAsEagerDoes) {
  struct Model : nn::Module {
    nn::Linear fc1{4, 6}, fc2{6, 2};
    nn::BatchNorm1d bn{6};
    Model() {
      register_module("fc1", fc1);
      register_module("bn", bn);
      register_module("fc2", fc2);
    }
    Tensor operator()(const Tensor& x) { return fc2(relu(bn(fc1(x)))); }
  };
  Model eager, traced;
  traced.load_state_dict(eager.state_dict());
  optim::SGD opt_e(eager.parameters(), 0.1), opt_t(traced.parameters(), 0.1);
  auto step = [](Model& m, optim::SGD& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = mse_loss(m(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor x0 = randn({8, 4}), y0 = randn({8, 2});
  jit::Function f = jit::trace([&](Tensor x, Tensor y) { return step(traced, opt_t, x, y); }, {x0, y0});
  for (int s = 0; s < 3; ++s) {
    Tensor x = randn({8, 4}), y = randn({8, 2});
    Tensor le = step(eager, opt_e, x, y), lt = f(x, y);
    expect_close(lt, le.to_vector<double>(), 1e-5, 1e-5);
  }
  for (auto& [name, t] : eager.state_dict()) {
    SCOPED_TRACE(name);
    expect_close(traced.state_dict().at(name), t.to_vector<double>(), 1e-5, 1e-5);
  }
  EXPECT_EQ(traced.bn.num_batches_tracked.item<int64_t>(), 3);  // the trace's example call is not a step
}

TEST(BatchNorm, RefusesWhatTorchRefuses) {
  nn::BatchNorm2d bn(3);
  expect_error([&] { bn(randn({2, 3, 4})); }, {"BatchNorm2d", "rank 4", "f32[2,3,4]"});
  nn::BatchNorm1d one(3);
  expect_error([&] { one(randn({1, 3})); }, {"batch_norm", "more than 1 value per channel", "f32[1,3]"});
  expect_error([&] { nn::batch_norm(randn({2, 3}), zeros({4}), ones({4})); }, {"batch_norm", "[3]", "f32[4]"});
}

TEST(GroupNorm, NormalizesEachGroupOfEachSample) {
  nn::GroupNorm gn(2, 4);
  gn.weight.detach().copy_(randn({4}));
  gn.bias.detach().copy_(randn({4}));
  Tensor x = randn({3, 4, 5}, f32) * 3.0;
  std::vector<double> v = x.to_vector<double>(), w = gn.weight.to_vector<double>(), b = gn.bias.to_vector<double>(),
                      want;
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t g = 0; g < 2; ++g) {
      size_t start = static_cast<size_t>((n * 4 + g * 2) * 5);
      double m = 0, q = 0;
      for (size_t i = 0; i < 10; ++i) m += v[start + i] / 10;
      for (size_t i = 0; i < 10; ++i) q += (v[start + i] - m) * (v[start + i] - m) / 10;
      for (size_t i = 0; i < 10; ++i) {
        size_t ch = static_cast<size_t>(g * 2) + i / 5;
        want.push_back((v[start + i] - m) / std::sqrt(q + 1e-5) * w[ch] + b[ch]);
      }
    }
  expect_close(gn(x), want, 1e-5, 1e-5);
  Tensor p = randn({2, 4, 3}, f64).requires_grad_(), pw = randn({4}, f64).requires_grad_();
  EXPECT_EQ(autograd::gradcheck([](std::span<const Tensor> in) { return nn::group_norm(in[0], 2, in[1]); },
                                std::vector<Tensor>{p, pw}),
            "");
  expect_error([] { nn::group_norm(randn({2, 6, 3}), 4); }, {"group_norm", "4 groups", "6 channels"});
}

TEST(RMSNorm, ScalesByTheRootMeanSquareWithTheDtypesEpsilon) {
  nn::RMSNorm rms({4});
  rms.weight.detach().copy_(randn({4}));
  Tensor x = randn({3, 4});
  std::vector<double> v = x.to_vector<double>(), w = rms.weight.to_vector<double>(), want;
  for (size_t r = 0; r < 3; ++r) {
    double ms = 0;
    for (size_t i = 0; i < 4; ++i) ms += v[r * 4 + i] * v[r * 4 + i] / 4;
    for (size_t i = 0; i < 4; ++i) want.push_back(v[r * 4 + i] / std::sqrt(ms + 1.1920928955078125e-07) * w[i]);
  }
  expect_close(rms(x), want, 1e-5, 1e-5);
  // A zero row: the epsilon keeps it finite.
  expect_close(nn::rms_norm(zeros({1, 4}), {4}), {0, 0, 0, 0}, 0, 0);
  Tensor p = randn({2, 3, 4}, f64).requires_grad_();
  EXPECT_EQ(autograd::gradcheck(
                [](std::span<const Tensor> in) {
                  return nn::rms_norm(in[0], {3, 4}, {}, 1e-6);
                },
                std::vector<Tensor>{p}),
            "");
  expect_error([] { nn::rms_norm(randn({2, 3}), {2}); }, {"rms_norm", "trailing", "f32[2,3]"});
}
