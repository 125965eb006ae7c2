// tests/nn/optim_more_test.cpp -- RMSprop and Adagrad against their rules written out here in
// double (the fused pass and the Tensor path), optimizer state_dict with a checkpoint resumed
// bit for bit, and the schedules LinearLR, LambdaLR and SequentialLR.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

// loss(p) = sum(a p^2 + b p), gradient 2 a p + b.
const std::vector<double> kA{0.5, 1.5, 2.0, 0.1}, kB{1.0, -2.0, 0.3, 4.0}, kP0{1.0, -0.5, 2.0, 0.25};

void backward_of_loss(const Tensor& p) {
  Tensor a = from_vector(kA).to(p.dtype()), b = from_vector(kB).to(p.dtype());
  (a * p * p + b * p).sum().backward();
}

using Rule = std::function<void(std::vector<double>& w, const std::vector<double>& g)>;

// `steps` steps of opt on p (as made by make_param) beside the rule in double.
void run_against(Tensor p, optim::Optimizer& opt, const Rule& rule, int steps, double tol) {
  std::vector<double> want = kP0;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    backward_of_loss(p);
    opt.step();
    std::vector<double> g;
    for (size_t i = 0; i < want.size(); ++i) g.push_back(2 * kA[i] * want[i] + kB[i]);
    rule(want, g);
    expect_close(p, want, tol, tol);
  }
}

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
