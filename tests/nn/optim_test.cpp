// tests/nn/optim_test.cpp -- optimizers against the update rules written out here in double,
// driven by real gradients, and the learning-rate schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "tests/nn/optim_rule.h"

using namespace kiln;
using kiln::test::backward_of_loss;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::kP0;
using kiln::test::run_against;

namespace {

void compute_grad(Tensor& p, optim::Optimizer& opt) {
  opt.zero_grad();
  backward_of_loss(p);
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
    if (v.empty()) v = g;  // PyTorch: the first buffer is the gradient itself
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
    if (v.empty()) v = g;
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
      if (decoupled) w[i] *= 1 - lr * wd;
      else g += wd * w[i];
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
  expect_error([&] { optim::SGD({from_vector<double>({1.0})}, 0.1); }, {"optimizer", "requires grad"});
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

// ---- many parameters, every option: the fused pass against today's rules in double --------

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (!(a.type() == b.type())) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), a.numel() * dtype_size(a.dtype())) == 0;
}

// The optimizer rules as kiln writes them (torch.optim's), in double, for many parameters.
// Step counts are the optimizer's (shared by all parameters), and parameters without a
// gradient are skipped, state included.
struct RefRule {
  enum Kind { Sgd, Adam, AdamW } kind;
  optim::SgdOptions sgd;
  optim::AdamOptions adam;
  double lr;
  std::vector<std::vector<double>> p, s0, s1;  // parameters; velocity or the two moments
  int steps = 0;

  void step(const std::vector<std::vector<double>>& grads, const std::vector<bool>& has_grad) {
    if (kind != Sgd) ++steps;
    for (size_t j = 0; j < p.size(); ++j) {
      if (!has_grad[j]) continue;
      if (s0.size() <= j) s0.resize(j + 1), s1.resize(j + 1);
      if (s0[j].empty()) s0[j].assign(p[j].size(), 0), s1[j].assign(p[j].size(), 0);
      for (size_t i = 0; i < p[j].size(); ++i)
        kind == Sgd ? sgd_one(p[j][i], grads[j][i], s0[j][i]) : adam_one(p[j][i], grads[j][i], s0[j][i], s1[j][i]);
    }
    if (kind == Sgd) ++steps;
  }
  void sgd_one(double& w, double g, double& v) const {
    if (sgd.weight_decay != 0) g += sgd.weight_decay * w;
    if (sgd.momentum != 0) {
      v = steps == 0 && sgd.dampening != 0 ? g : sgd.momentum * v + (1 - sgd.dampening) * g;
      g = sgd.nesterov ? g + sgd.momentum * v : v;
    }
    w -= lr * g;
  }
  void adam_one(double& w, double g, double& m, double& v) const {
    const optim::AdamOptions& o = adam;
    if (o.weight_decay != 0) {
      if (kind == AdamW) w *= 1 - lr * o.weight_decay;
      else g += o.weight_decay * w;
    }
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g * g;
    double c1 = 1 - std::pow(o.beta1, steps), c2 = 1 - std::pow(o.beta2, steps);
    w -= lr * (m / c1) / (std::sqrt(v / c2) + o.eps);
  }
};

// Shapes whose sizes are not multiples of the vector lanes, and more elements in all than
// one thread's share, so parameters straddle the threads' chunks.
const std::vector<Dims> kShapes = {{1}, {7}, {33, 5}, {40000}, {3}, {300, 101}, {0}, {2, 2}};

struct Problem {
  std::vector<Tensor> params;
  RefRule ref;
};

Problem make_problem(RefRule::Kind kind, double lr, DType dtype) {
  Problem s;
  s.ref.kind = kind;
  s.ref.lr = lr;
  for (const Dims& shape : kShapes) {
    // Mixed dtypes when asked for f64: every other parameter is f32.
    DType t = dtype == f64 && s.params.size() % 2 ? f32 : dtype;
    Tensor p = randn(shape, t).requires_grad_();
    s.params.push_back(p);
    s.ref.p.push_back(p.to_vector<double>());
  }
  return s;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Problem& s) {
  if (s.ref.kind == RefRule::Sgd) return std::make_unique<optim::SGD>(s.params, s.ref.lr, s.ref.sgd);
  if (s.ref.kind == RefRule::Adam) return std::make_unique<optim::Adam>(s.params, s.ref.lr, s.ref.adam);
  const optim::AdamOptions& o = s.ref.adam;
  return std::make_unique<optim::AdamW>(
      s.params, s.ref.lr,
      optim::AdamWOptions{.beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay});
}

// Gradients for one step: random, some strided (a transpose's or a slice's), and at step 1
// none for parameter 2 (and at step 0 none for parameter 4: its state starts later).
void set_grads(Problem& s, int step, std::vector<std::vector<double>>& grads, std::vector<bool>& has) {
  grads.assign(s.params.size(), {});
  has.assign(s.params.size(), true);
  for (size_t j = 0; j < s.params.size(); ++j) {
    Tensor& p = s.params[j];
    if ((step == 1 && j == 2) || (step == 0 && j == 4)) {
      p.zero_grad();
      has[j] = false;
      continue;
    }
    Tensor g;
    if (p.dim() == 2 && step % 2 == 0) g = randn({p.size(1), p.size(0)}, p.dtype()).t();
    else if (p.dim() == 1 && j % 3 == 0) g = randn({2 * p.size(0)}, p.dtype()).slice(0, 0, 2 * p.size(0), 2);
    else g = randn(p.shape(), p.dtype());
    p.set_grad(g);
    grads[j] = g.to_vector<double>();
  }
}

void run_case(Problem s, int steps = 4) {
  auto opt = make_optimizer(s);
  std::vector<std::vector<double>> grads;
  std::vector<bool> has;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    set_grads(s, step, grads, has);
    opt->step();
    s.ref.step(grads, has);
    for (size_t j = 0; j < s.params.size(); ++j) {
      SCOPED_TRACE(testing::Message() << "parameter " << j << " " << s.params[j].type().str());
      double tol = s.params[j].dtype() == f64 ? 1e-12 : 2e-5;
      expect_close(s.params[j], s.ref.p[j], tol, tol);
    }
  }
}

}  // namespace

TEST(OptimFused, SgdEveryOptionMatchesTheRule) {
  const std::vector<optim::SgdOptions> options = {
      {},
      {.weight_decay = 0.1},
      {.momentum = 0.9},
      {.momentum = 0.9, .dampening = 0.3},
      {.momentum = 0.8, .dampening = 0.2, .weight_decay = 0.05},
      {.momentum = 0.8, .nesterov = true},
      {.momentum = 0.7, .weight_decay = 0.01, .nesterov = true},
  };
  for (DType t : {f32, f64})
    for (const optim::SgdOptions& o : options) {
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " momentum " << o.momentum << " dampening " << o.dampening
                                      << " nesterov " << o.nesterov << " decay " << o.weight_decay);
      manual_seed(11);
      Problem s = make_problem(RefRule::Sgd, 0.05, t);
      s.ref.sgd = o;
      run_case(s);
    }
}

TEST(OptimFused, AdamAndAdamWMatchTheRule) {
  const std::vector<optim::AdamOptions> options = {
      {},
      {.weight_decay = 0.1},
      {.beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.02},
      {.beta1 = 0, .beta2 = 0.5, .eps = 0.1},
  };
  for (RefRule::Kind kind : {RefRule::Adam, RefRule::AdamW})
    for (DType t : {f32, f64})
      for (const optim::AdamOptions& o : options) {
        SCOPED_TRACE(testing::Message() << (kind == RefRule::Adam ? "Adam " : "AdamW ") << dtype_name(t) << " betas "
                                        << o.beta1 << " " << o.beta2 << " eps " << o.eps << " decay "
                                        << o.weight_decay);
        manual_seed(12);
        Problem s = make_problem(kind, 0.01, t);
        s.ref.adam = o;
        run_case(s, 6);
      }
}

TEST(OptimFused, AdamWKeepsItsWeightDecayWhenOtherOptionsAreGiven) {
  Tensor p = param();
  optim::AdamW opt({p}, 0.01, {.eps = 1e-6});  // AdamOptions would have made the decay 0
  RefAdam ref{0.01, 0.9, 0.999, 1e-6, 1e-2, true};
  run_against(p, opt, std::ref(ref), 5);
  optim::AdamWOptions defaults;
  EXPECT_EQ(defaults.weight_decay, 1e-2);
}

namespace {

// Runs a few steps of `make`'s optimizer on copies of the same parameters and gradients.
std::vector<Tensor> train(const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make,
                          const std::vector<Tensor>& init, int threads = 0, bool transposed = false) {
  int saved = num_threads();
  if (threads) set_num_threads(threads);
  std::vector<Tensor> params;
  for (const Tensor& t : init) {
    // Transposed: the same values in a column-major (non-contiguous) leaf.
    Tensor c = transposed ? t.t().contiguous().t() : t.clone();
    params.push_back(c.detach().requires_grad_());
    EXPECT_EQ(params.back().is_contiguous(), !transposed);
  }
  auto opt = make(params);
  manual_seed(5);
  for (int step = 0; step < 3; ++step) {
    for (Tensor& p : params) p.set_grad(randn(p.shape(), p.dtype()));
    opt->step();
  }
  set_num_threads(saved);
  return params;
}

std::vector<std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>> all_optimizers() {
  return {
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(std::move(p), 0.1,
                                            optim::SgdOptions{.momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
      },
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(std::move(p), 0.1, optim::SgdOptions{.momentum = 0.9, .nesterov = true});
      },
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(std::move(p), 0.01, optim::AdamOptions{.weight_decay = 0.1});
      },
      [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(std::move(p), 0.01); },
  };
}

}  // namespace

TEST(OptimFused, TheFusedPassAndTheTensorOpsGiveTheSameBits) {
  // A transposed leaf is not contiguous: it takes the Tensor path, its twin the fused pass.
  manual_seed(13);
  for (DType t : {f32, f64}) {
    Tensor a = randn({37, 45}, t), b = randn({45, 37}, t).t().contiguous();
    std::vector<Tensor> init = {a, b};
    for (const auto& make : all_optimizers()) {
      std::vector<Tensor> fused = train(make, init);
      std::vector<Tensor> ops = train(make, init, 0, true);
      for (size_t i = 0; i < fused.size(); ++i)
        EXPECT_TRUE(bitwise_equal(fused[i], ops[i])) << dtype_name(t) << " parameter " << i;
    }
  }
}

TEST(OptimFused, ResultsDoNotDependOnTheThreadCount) {
  manual_seed(14);
  std::vector<Tensor> init = {randn({70001}), randn({3, 5}, f64), randn({40000}), randn({1})};
  for (const auto& make : all_optimizers()) {
    std::vector<Tensor> one = train(make, init, 1), two = train(make, init, 2);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], two[i])) << i;
  }
}

TEST(OptimFused, AStepAllocatesNothing) {
  std::vector<Tensor> params = {randn({100000}).requires_grad_(), randn({64, 33}, f64).requires_grad_(),
                                randn({5}).requires_grad_()};
  for (const auto& make : all_optimizers()) {
    auto opt = make(params);
    for (Tensor& p : params) p.set_grad(randn(p.shape(), p.dtype()));
    opt->step();  // the first step too, but measure a later one
    int64_t before = cpu_allocator().stats().allocations;
    opt->step();
    opt->step();
    EXPECT_EQ(cpu_allocator().stats().allocations, before);
  }
}

TEST(OptimFused, AStepMakesSavedParametersStale) {
  Tensor p = param(), x = from_vector<double>({1, 2, 3, 4}).requires_grad_();
  optim::Adam opt({p}, 0.1);
  (p * p).sum().backward();
  Tensor z = p * x;  // d/dx reads p
  opt.step();
  expect_error([&] { z.sum().backward(); }, {"mul", "in-place", "version"});
}

TEST(OptimFused, AParameterListedTwiceIsUpdatedTwice) {
  // Large enough for two threads: entries that share memory run one after the other.
  Tensor p = zeros({100003}, f64).requires_grad_();
  optim::SGD opt({p, p}, 0.25, {.momentum = 0.5});
  p.set_grad(ones({100003}, f64));
  opt.step();  // each entry has its own velocity: p = 0 - 0.25 - 0.25
  expect_close(p, std::vector<double>(100003, -0.5), 0);
}

// The spacing of dtype t's values at x (f16: 10 fraction bits, bf16: 7).
double ulp(DType t, double x) {
  int bits = t == f16 ? 10 : 7;
  return std::ldexp(1.0, std::ilogb(std::max(std::abs(x), t == f16 ? 6.2e-5 : 1.2e-38)) - bits);
}

TEST(OptimFused, HalfParametersTakeTheTensorOps) {
  // Each step is checked against Adam in double from the parameter and gradient the step
  // started from (so rounding does not accumulate), within 2 ulps of the parameter plus 5% of
  // the update (m and v are kept in the half dtype too). lr 0.1 keeps every update several
  // times that bound, so an optimizer that did nothing, or half the step, would fail.
  for (DType t : {f16, bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor p = param(t);
    optim::Adam opt({p}, 0.1);
    std::vector<double> m(kP0.size()), v(kP0.size());
    for (int step = 1; step <= 3; ++step) {
      compute_grad(p, opt);
      std::vector<double> before = p.to_vector<double>(), g = p.grad().to_vector<double>(), want;
      std::vector<double> tol;
      for (size_t i = 0; i < before.size(); ++i) {
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
        double mhat = m[i] / (1 - std::pow(0.9, step)), vhat = v[i] / (1 - std::pow(0.999, step));
        double update = 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
        want.push_back(before[i] - update);
        tol.push_back(2 * ulp(t, want.back()) + 0.05 * std::abs(update));
        ASSERT_GT(std::abs(update), 2 * tol.back()) << "the test cannot tell a step from none at " << i;
      }
      opt.step();
      std::vector<double> got = p.to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], tol[i]) << "step " << step << ", element " << i;
    }
    EXPECT_EQ(p.dtype(), t);
  }
}
