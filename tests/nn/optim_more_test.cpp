// tests/nn/optim_more_test.cpp -- RMSprop and Adagrad against their rules written out here in
// double (the fused pass and the Tensor path), optimizer state_dict with a checkpoint resumed
// bit for bit, and the schedules LinearLR, LambdaLR, SequentialLR and OneCycleLR (with the
// momentum it cycles read by traced steps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "jit/trace.h"
#include "nn/optim.h"
#include "tests/nn/optim_rule.h"

using namespace kiln;
using kiln::test::backward_of_loss;
using kiln::test::expect_close;
using kiln::test::expect_error;
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
  auto rms = [](Tensor p) { return std::make_unique<optim::RMSprop>(std::vector<Tensor>{p}, 0.01, optim::RmspropOptions{.momentum = 0.5, .centered = true}); };
  auto ada = [](Tensor p) { return std::make_unique<optim::Adagrad>(std::vector<Tensor>{p}, 0.1, optim::AdagradOptions{.lr_decay = 0.1}); };
  expect_close(run(true, rms), run(false, rms).to_vector<double>(), 1e-12, 1e-12);
  expect_close(run(true, ada), run(false, ada).to_vector<double>(), 1e-12, 1e-12);
}

TEST(OptimizerState, ACheckpointResumesBitForBit) {
  struct Net : nn::Module {
    nn::Linear fc1{3, 8}, fc2{8, 2};
    Net() {
      register_module("fc1", fc1);
      register_module("fc2", fc2);
    }
    Tensor operator()(const Tensor& x) { return fc2(tanh(fc1(x))); }
  };
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 8; ++i) xs.push_back(randn({5, 3})), ys.push_back(randn({5, 2}));
  using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(Net&)>;
  std::vector<std::pair<const char*, MakeOpt>> kinds = {
      {"AdamW", [](Net& n) { return std::make_unique<optim::AdamW>(n.parameters(), 0.01); }},
      {"SGD", [](Net& n) { return std::make_unique<optim::SGD>(n.parameters(), 0.05, optim::SgdOptions{.momentum = 0.9, .dampening = 0.1}); }},
      {"RMSprop", [](Net& n) { return std::make_unique<optim::RMSprop>(n.parameters(), 0.01, optim::RmspropOptions{.momentum = 0.5, .centered = true}); }},
      {"Adagrad", [](Net& n) { return std::make_unique<optim::Adagrad>(n.parameters(), 0.05, optim::AdagradOptions{.lr_decay = 0.01}); }},
  };
  for (auto& [name, make] : kinds) {
    SCOPED_TRACE(name);
    auto train = [&](Net& net, optim::Optimizer& opt, int from, int to) {
      for (int i = from; i < to; ++i) {
        opt.zero_grad();
        mse_loss(net(xs[static_cast<size_t>(i)]), ys[static_cast<size_t>(i)]).backward();
        opt.step();
      }
    };
    Net unbroken;
    std::map<std::string, Tensor> init;
    for (auto& [n, t] : unbroken.state_dict()) init[n] = t.detach().clone();
    auto opt = make(unbroken);
    opt->set_lr(opt->lr() * 0.5);  // the rate is state too
    train(unbroken, *opt, 0, 8);

    Net first;
    first.load_state_dict(init);
    auto opt1 = make(first);
    opt1->set_lr(opt1->lr() * 0.5);
    train(first, *opt1, 0, 4);
    std::string model_file = ::testing::TempDir() + "kiln_resume_model.safetensors";
    std::string opt_file = ::testing::TempDir() + "kiln_resume_opt.safetensors";
    first.save(model_file);
    save_safetensors(opt1->state_dict(), opt_file);

    Net resumed;
    resumed.load(model_file);
    auto opt2 = make(resumed);
    opt2->load_state_dict(load_safetensors(opt_file));
    EXPECT_EQ(opt2->lr(), opt1->lr());
    train(resumed, *opt2, 4, 8);
    for (auto& [n, t] : unbroken.state_dict()) {
      SCOPED_TRACE(n);
      EXPECT_EQ(resumed.state_dict().at(n).to_vector<double>(), t.to_vector<double>());  // bit for bit
    }
    std::remove(model_file.c_str());
    std::remove(opt_file.c_str());
  }
}

TEST(OptimizerState, NamesTorchsStateAndRefusesAMismatch) {
  Tensor a = randn({2, 3}).requires_grad_(), b = randn({3}).requires_grad_();
  optim::Adam adam({a, b});
  std::vector<std::string> names;
  for (auto& [n, t] : adam.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"lr", "state.0.exp_avg", "state.0.exp_avg_sq", "state.1.exp_avg",
                                             "state.1.exp_avg_sq", "step"}));
  auto sd = adam.state_dict();
  sd.erase("step");
  expect_error([&] { adam.load_state_dict(sd); }, {"load_state_dict", "missing [step]"});
  auto wrong = adam.state_dict();
  wrong["state.1.exp_avg"] = zeros({4});
  expect_error([&] { adam.load_state_dict(wrong); }, {"load_state_dict", "state.1.exp_avg", "f32[3]", "f32[4]"});
}

TEST(Schedules, LinearLambdaAndSequentialFollowTorch) {
  Tensor p = randn({2}).requires_grad_();
  optim::SGD opt({p}, 0.9);
  {
    optim::LinearLR warm(opt, 0.25, 1.0, 4);
    std::vector<double> got{opt.lr()};
    for (int i = 0; i < 5; ++i) warm.step(), got.push_back(opt.lr());
    std::vector<double> want{0.225, 0.39375, 0.5625, 0.73125, 0.9, 0.9};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  }
  {
    optim::LambdaLR lam(opt, [](int64_t t) { return 1.0 / static_cast<double>(t + 1); });
    EXPECT_NEAR(opt.lr(), 0.9, 1e-15);
    lam.step();
    lam.step();
    EXPECT_NEAR(opt.lr(), 0.3, 1e-15);
  }
  // Warmup for 3 steps, then a cosine over 4 from the initial rate.
  auto warm = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, 3);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 4, 0.0);
  optim::SequentialLR seq(opt, {warm, cosine}, {3});
  std::vector<double> got{opt.lr()};
  for (int i = 0; i < 7; ++i) seq.step(), got.push_back(opt.lr());
  std::vector<double> want{0.09, 0.36, 0.63, 0.9};  // 0.9 (0.1 + 0.9 t / 3)
  for (int t = 1; t <= 4; ++t) want.push_back(0.9 * (1 + std::cos(M_PI * t / 4)) / 2);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  expect_error([&] { optim::SequentialLR bad(opt, {warm, cosine}, {}); }, {"SequentialLR", "one milestone fewer"});
}

// torch.optim.lr_scheduler.OneCycleLR's rule written out: max_lr 1 over 10 steps, pct_start 0.3
// (phase one ends at step 0.3 * 10 - 1 = 2, phase two at 9), cos annealing from 1/25 up to 1
// and down to 1/25/1e4, while momentum goes 0.95 -> 0.85 -> 0.95.
TEST(Schedules, OneCycleFollowsTorchAndCyclesMomentum) {
  Tensor p = randn({2}).requires_grad_();
  optim::SGD opt({p}, 0.1, {.momentum = 0.9});
  optim::OneCycleLR one(opt, 1.0, 10);
  auto cosine = [](double a, double b, double pct) { return b + (a - b) / 2 * (std::cos(M_PI * pct) + 1); };
  auto lr_at = [&](int t) { return t <= 2 ? cosine(0.04, 1.0, t / 2.0) : cosine(1.0, 0.04 / 1e4, (t - 2) / 7.0); };
  for (int t = 0; t <= 10; ++t) {
    SCOPED_TRACE(t);
    EXPECT_NEAR(opt.lr(), lr_at(t), 1e-15);
    EXPECT_NEAR(opt.momentum(), t <= 2 ? cosine(0.95, 0.85, t / 2.0) : cosine(0.85, 0.95, (t - 2) / 7.0), 1e-15);
    if (t < 10) one.step();
  }
  EXPECT_NEAR(one.lr_at(2), 1.0, 1e-15);
  EXPECT_NEAR(one.lr_at(9), 4e-6, 1e-18);
  expect_error([&] { one.step(); }, {"OneCycleLR", "past total_steps = 10"});
  // The linear strategy and three phases (up to step 2, back down to 1/25 at step 4, then to
  // the lowest at 9).
  optim::OneCycleLR three(opt, 1.0, 10, {.anneal_strategy = "linear", .three_phase = true});
  EXPECT_NEAR(three.lr_at(1), 0.04 + 0.96 / 2, 1e-15);
  EXPECT_NEAR(three.lr_at(3), 1.0 - 0.96 / 2, 1e-15);
  EXPECT_NEAR(three.momentum_at(3), 0.9, 1e-15);
  EXPECT_NEAR(three.lr_at(9), 4e-6, 1e-17);
  // A schedule's checkpoint: the step count, which puts the rate and momentum back.
  std::map<std::string, double> state = one.state_dict();
  EXPECT_EQ(state.at("last_epoch"), 10);
  optim::OneCycleLR resumed(opt, 1.0, 10);
  resumed.load_state_dict({{"last_epoch", 5}});
  EXPECT_NEAR(opt.lr(), lr_at(5), 1e-15);
  EXPECT_EQ(resumed.last_epoch(), 5);
  expect_error([&] { resumed.load_state_dict({{"epoch", 5}}); }, {"load_state_dict", "last_epoch"});
  // Adam cycles beta1; an optimizer without momentum is refused unless cycling is off.
  optim::Adam adam({p}, 0.1);
  optim::OneCycleLR on_adam(adam, 0.5, 4);
  EXPECT_EQ(adam.momentum(), 0.95);
  optim::SGD plain({p}, 0.1);
  expect_error([&] { optim::OneCycleLR bad(plain, 1.0, 10); }, {"SGD", "without momentum"});
  optim::OneCycleLR lr_only(plain, 1.0, 10, {.cycle_momentum = false});
  EXPECT_NEAR(plain.lr(), 0.04, 1e-15);
  optim::Adagrad adagrad({p}, 0.1);
  expect_error([&] { optim::OneCycleLR bad(adagrad, 1.0, 10); }, {"no momentum"});
}

// A traced step reads the momentum (and beta1) the schedule set for its call, as the eager step
// does: SGD and Adam, five scheduled steps each, beside the same steps eagerly.
TEST(Schedules, ATracedStepReadsTheCycledMomentum) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "Adam" : "SGD");
    Tensor a = from_vector(kP0).to(DType::F32).requires_grad_(), b = from_vector(kP0).to(DType::F32).requires_grad_();
    auto make = [&](Tensor p) -> std::unique_ptr<optim::Optimizer> {
      if (adam) return std::make_unique<optim::Adam>(std::vector<Tensor>{p}, 0.1);
      return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, 0.1, optim::SgdOptions{.momentum = 0.9});
    };
    std::unique_ptr<optim::Optimizer> ea = make(a), tb = make(b);
    optim::OneCycleLR sa(*ea, 0.5, 6), sb(*tb, 0.5, 6);
    auto step = [](Tensor p, optim::Optimizer& opt) {
      opt.zero_grad();
      backward_of_loss(p);
      opt.step();
      return p.detach().clone();
    };
    jit::Function fast = jit::trace([&](Tensor x) { return step(b, *tb) + x; }, {zeros({4})});
    for (int i = 0; i < 5; ++i) {
      SCOPED_TRACE(i);
      Tensor want = step(a, *ea), got = fast(zeros({4}));
      sa.step();
      sb.step();
      std::vector<double> w = want.to(DType::F64).to_vector<double>();
      expect_close(got, w, 1e-6, 1e-6);
    }
    EXPECT_EQ(fast.stats().traces, 1);
  }
}
