// tests/nn/optim_test.cpp -- optimizers against the update rules written out here in double,
// driven by real gradients, and the learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

// loss(p) = sum(a p^2 + b p), gradient 2 a p + b: a different gradient at every step.
const std::vector<double> kA{0.5, 1.5, 2.0, 0.1}, kB{1.0, -2.0, 0.3, 4.0},
    kP0{1.0, -0.5, 2.0, 0.25};

std::vector<double> ref_grad(const std::vector<double>& p) {
  std::vector<double> g;
  for (size_t i = 0; i < p.size(); ++i) g.push_back(2 * kA[i] * p[i] + kB[i]);
  return g;
}

void compute_grad(Tensor& p, optim::Optimizer& opt) {
  opt.zero_grad();
  Tensor a = from_vector(kA).to(p.dtype()), b = from_vector(kB).to(p.dtype());
  (a * p * p + b * p).sum().backward();
}

// Runs `steps` steps of `opt` on p and of `ref` (one update of the double state) side by side.
void run_against(Tensor& p, optim::Optimizer& opt,
                 const std::function<void(std::vector<double>&, const std::vector<double>&)>& ref,
                 int steps = 5, double tol = 1e-12) {
  std::vector<double> want = kP0;
  for (int s = 0; s < steps; ++s) {
    compute_grad(p, opt);
    opt.step();
    ref(want, ref_grad(want));
    expect_close(p, want, tol, tol);
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
  }
}

Tensor param(DType dt = f64) { return from_vector(kP0).to(dt).requires_grad_(); }

}  // namespace

TEST(Optim, SgdPlain) {
  Tensor p = param();
  optim::SGD opt({p}, 0.1);
  run_against(p, opt, [](std::vector<double>& w, const std::vector<double>& g) {
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.1 * g[i];
  });
}

TEST(Optim, SgdMomentumWithDampening) {
  Tensor p = param();
  optim::SGD opt({p}, 0.05, {.momentum = 0.9, .dampening = 0.2});
  std::vector<double> v;
  run_against(p, opt, [&](std::vector<double>& w, const std::vector<double>& g) {
    if (v.empty())
      v = g;  // PyTorch: the first buffer is the gradient itself
    else
      for (size_t i = 0; i < w.size(); ++i) v[i] = 0.9 * v[i] + (1 - 0.2) * g[i];
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.05 * v[i];
  });
}

TEST(Optim, SgdNesterovWithWeightDecay) {
  Tensor p = param();
  optim::SGD opt({p}, 0.05, {.momentum = 0.8, .weight_decay = 0.1, .nesterov = true});
  std::vector<double> v;
  run_against(p, opt, [&](std::vector<double>& w, const std::vector<double>& g0) {
    std::vector<double> g = g0;
    for (size_t i = 0; i < w.size(); ++i) g[i] += 0.1 * w[i];
    if (v.empty())
      v = g;
    else
      for (size_t i = 0; i < w.size(); ++i) v[i] = 0.8 * v[i] + g[i];
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.05 * (g[i] + 0.8 * v[i]);
  });
}

TEST(Optim, SgdWeightDecayWithoutMomentum) {
  Tensor p = param();
  optim::SGD opt({p}, 0.1, {.weight_decay = 0.5});
  run_against(p, opt, [](std::vector<double>& w, const std::vector<double>& g) {
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.1 * (g[i] + 0.5 * w[i]);
  });
}

namespace {
// One Adam step in double; decoupled: AdamW.
struct RefAdam {
  RefAdam(double lr, double b1, double b2, double eps, double wd, bool decoupled)
      : lr(lr), b1(b1), b2(b2), eps(eps), wd(wd), decoupled(decoupled) {}
  double lr, b1, b2, eps, wd;
  bool decoupled;
  std::vector<double> m, v;
  int t = 0;
  void operator()(std::vector<double>& w, const std::vector<double>& g0) {
    if (m.empty()) m.assign(w.size(), 0), v.assign(w.size(), 0);
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      double g = g0[i];
      if (decoupled)
        w[i] *= 1 - lr * wd;
      else
        g += wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};
}  // namespace

TEST(Optim, AdamDefaults) {
  Tensor p = param();
  optim::Adam opt({p}, 0.01);
  RefAdam ref{0.01, 0.9, 0.999, 1e-8, 0, false};
  run_against(p, opt, std::ref(ref), 8);
}

TEST(Optim, AdamWithL2WeightDecayAndCustomBetas) {
  Tensor p = param();
  optim::Adam opt({p}, 0.02, {.beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1});
  RefAdam ref{0.02, 0.8, 0.99, 1e-6, 0.1, false};
  run_against(p, opt, std::ref(ref), 8);
}

TEST(Optim, AdamWDecouplesWeightDecay) {
  Tensor p = param();
  optim::AdamW opt({p}, 0.01);  // default weight_decay 1e-2
  RefAdam ref{0.01, 0.9, 0.999, 1e-8, 1e-2, true};
  run_against(p, opt, std::ref(ref), 8);
  Tensor q = param();
  optim::AdamW opt2({q}, 0.05, {.weight_decay = 0.3});
  RefAdam ref2{0.05, 0.9, 0.999, 1e-8, 0.3, true};
  run_against(q, opt2, std::ref(ref2), 8);
}

TEST(Optim, AdamOnF32ParametersStaysF32) {
  Tensor p = param(f32);
  optim::Adam opt({p}, 0.01);
  RefAdam ref{0.01, 0.9, 0.999, 1e-8, 0, false};
  run_against(p, opt, std::ref(ref), 5, 1e-5);
  EXPECT_EQ(p.dtype(), f32);
}

TEST(Optim, ParametersWithoutGradientsAreLeftAlone) {
  Tensor p = param(), q = param();
  optim::Adam opt({p, q}, 0.1);
  (p * p).sum().backward();
  opt.step();
  expect_close(q, kP0, 0);
  EXPECT_FALSE(allclose(p, q));
  optim::SGD sgd({p, q}, 0.1, {.momentum = 0.9});
  sgd.zero_grad();
  (q * 2.0).sum().backward();
  std::vector<double> p_before = p.to_vector<double>();
  sgd.step();
  expect_close(p, p_before, 0);
  std::vector<double> want;
  for (double v : kP0) want.push_back(v - 0.2);
  expect_close(q, want, 1e-15);
}

TEST(Optim, ZeroGradDropsEveryGradient) {
  Tensor p = param(), q = param();
  optim::SGD opt({p, q}, 0.1);
  (p * q).sum().backward();
  EXPECT_TRUE(p.grad().defined());
  EXPECT_TRUE(q.grad().defined());
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  EXPECT_FALSE(q.grad().defined());
}

TEST(Optim, ConstructorChecks) {
  Tensor p = param();
  expect_error([&] { optim::SGD({p * 2.0}, 0.1); }, {"optimizer", "parameter 0", "leaf"});
  expect_error([&] { optim::SGD({from_vector<double>({1.0})}, 0.1); },
               {"optimizer", "requires grad"});
  expect_error([&] { optim::SGD({p}, -1); }, {"optimizer", "learning rate", "-1"});
  expect_error([&] { optim::SGD({p}, 0.1, {.nesterov = true}); }, {"SGD", "nesterov"});
  expect_error([&] { optim::Adam({p}, 0.1, {.beta1 = 1.0}); }, {"Adam", "betas"});
}

TEST(Schedule, StepLRDecaysEveryStepSize) {
  Tensor p = param();
  optim::SGD opt({p}, 0.1);
  optim::StepLR sched(opt, 3, 0.5);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  for (int epoch = 1; epoch <= 10; ++epoch) {
    sched.step();
    EXPECT_NEAR(opt.lr(), 0.1 * std::pow(0.5, epoch / 3), 1e-15) << "epoch " << epoch;
  }
  expect_error([&] { optim::StepLR(opt, 0); }, {"StepLR", "step_size"});
}

TEST(Schedule, CosineAnnealingFollowsHalfACosine) {
  Tensor p = param();
  optim::Adam opt({p}, 0.2);
  optim::CosineAnnealingLR sched(opt, 10, 0.02);
  for (int t = 1; t <= 10; ++t) {
    sched.step();
    double want = 0.02 + (0.2 - 0.02) * (1 + std::cos(M_PI * t / 10)) / 2;
    EXPECT_NEAR(opt.lr(), want, 1e-15) << "t " << t;
  }
  EXPECT_NEAR(opt.lr(), 0.02, 1e-15);
  expect_error([&] { optim::CosineAnnealingLR(opt, 0); }, {"CosineAnnealingLR", "t_max"});
}

TEST(Schedule, TheOptimizerUsesTheScheduledRate) {
  Tensor p = from_vector<double>({1.0}).requires_grad_();
  optim::SGD opt({p}, 1.0);
  optim::StepLR sched(opt, 1, 0.5);
  double want = 1.0, lr = 1.0;
  for (int s = 0; s < 4; ++s) {
    opt.zero_grad();
    (p * 1.0).sum().backward();  // gradient 1
    opt.step();
    want -= lr;
    sched.step();
    lr *= 0.5;
    expect_close(p, {want}, 1e-15);
  }
}
