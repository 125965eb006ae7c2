// tests/nn/rmsprop_adagrad_test.cpp -- RMSprop and Adagrad (nn/rmsprop_adagrad.cpp) against
// their rules written out here in double, through the fused pass and the Tensor path.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "jit/trace.h"
#include "nn/optim.h"
#include "tests/nn/optim_rule.h"

using namespace kiln;
using kiln::test::backward_of_loss;
using kiln::test::expect_close;
using kiln::test::kP0;
using kiln::test::run_against;

namespace {

// A contiguous f64 CPU parameter: the fused eager pass takes it (a traced step takes the
// Tensor path: Optimizers.TheTensorPathTakesTheFusedPassesSteps).
Tensor fused_param() { return from_vector(kP0).requires_grad_(); }

struct RefRmsprop {
  double lr, alpha, eps, wd, momentum;
  bool centered;
  std::vector<double> sq, buf, ga;
  void operator()(std::vector<double>& w, const std::vector<double>& g0) {
    if (sq.empty()) sq.assign(w.size(), 0), buf.assign(w.size(), 0), ga.assign(w.size(), 0);
    for (size_t i = 0; i < w.size(); ++i) {
      double g = g0[i] + wd * w[i];
      sq[i] = alpha * sq[i] + (1 - alpha) * g * g;
      double avg = std::sqrt(sq[i]) + eps;
      if (centered) {
        ga[i] = alpha * ga[i] + (1 - alpha) * g;
        avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
      }
      if (momentum > 0) {
        buf[i] = momentum * buf[i] + g / avg;
        w[i] -= lr * buf[i];
      } else {
        w[i] -= lr * g / avg;
      }
    }
  }
};

struct RefAdagrad {
  double lr, lr_decay, wd, init, eps;
  std::vector<double> sum;
  int t = 0;
  void operator()(std::vector<double>& w, const std::vector<double>& g0) {
    if (sum.empty()) sum.assign(w.size(), init);
    ++t;
    double clr = lr / (1 + (t - 1) * lr_decay);
    for (size_t i = 0; i < w.size(); ++i) {
      double g = g0[i] + wd * w[i];
      sum[i] += g * g;
      w[i] -= clr * g / (std::sqrt(sum[i]) + eps);
    }
  }
};

}  // namespace

TEST(Rmsprop, FollowsTorchsRuleInEveryVariant) {
  for (double momentum : {0.0, 0.9})
    for (bool centered : {false, true})
      for (double wd : {0.0, 0.1}) {
        SCOPED_TRACE(testing::Message() << "momentum " << momentum << " centered " << centered << " wd " << wd);
        Tensor p = fused_param();
        optim::RMSprop opt({p}, 0.01, {.weight_decay = wd, .momentum = momentum, .centered = centered});
        RefRmsprop ref{0.01, 0.99, 1e-8, wd, momentum, centered, {}, {}, {}};
        run_against(p, opt, std::ref(ref), 6, 1e-12);
      }
}

TEST(Adagrad, FollowsTorchsRule) {
  Tensor p = fused_param();
  optim::Adagrad opt({p}, 0.1, {.lr_decay = 0.05, .weight_decay = 0.01, .initial_accumulator_value = 0.2});
  RefAdagrad ref{0.1, 0.05, 0.01, 0.2, 1e-10, {}};
  run_against(p, opt, std::ref(ref), 6, 1e-12);
}

TEST(Optimizers, TheTensorPathTakesTheFusedPassesSteps) {
  // A traced step runs the Tensor path; it must give the fused pass's values.
  auto run = [](bool traced, auto make) {
    Tensor p = fused_param();
    auto opt = make(p);
    auto step = [&](Tensor x) {
      opt->zero_grad();
      backward_of_loss(p);
      opt->step();
      return x + 0.0;
    };
    Tensor x = zeros({1}, f64);
    if (traced) {
      jit::Function f = jit::trace([&](Tensor a) { return step(a); }, {x});
      for (int i = 0; i < 4; ++i) f(x);
    } else {
      for (int i = 0; i < 4; ++i) step(x);  // tracing records the step without taking it
    }
    return p.detach().clone();
  };
  auto rms = [](Tensor p) {
    return std::make_unique<optim::RMSprop>(std::vector<Tensor>{p}, 0.01,
                                            optim::RmspropOptions{.momentum = 0.5, .centered = true});
  };
  auto ada = [](Tensor p) {
    return std::make_unique<optim::Adagrad>(std::vector<Tensor>{p}, 0.1, optim::AdagradOptions{.lr_decay = 0.1});
  };
  expect_close(run(true, rms), run(false, rms).to_vector<double>(), 1e-12, 1e-12);
  expect_close(run(true, ada), run(false, ada).to_vector<double>(), 1e-12, 1e-12);
}
