// tests/nn/lr_scheduler_test.cpp -- the schedules (nn/lr_scheduler.cpp) LinearLR, LambdaLR,
// SequentialLR and OneCycleLR against torch's, with the momentum OneCycleLR cycles read by
// traced steps.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jit/trace.h"
#include "nn/optim.h"
#include "tests/nn/optim_rule.h"

using namespace kiln;
using kiln::test::backward_of_loss;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::kP0;

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
