// tests/jit/train_step_test.cpp -- traced training steps: backward() and optimizer updates
// inside a traced function do on every call what the eager step does.
#include <functional>
#include <memory>

#include "jit_test_util.h"

namespace kiln {
namespace {

using test::expect_same;

// With dropout after the hidden layer (masks drawn from the global generator, the same for
// the eager and the traced twin when they start from the same seed).
struct StepMlp : nn::Module {
  nn::Linear fc1{4, 8}, fc2{8, 3};
  double p = 0.25;
  StepMlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(nn::dropout(relu(fc1(x)), p, is_training())); }
};

// Two models with the same weights: one trained eagerly, one by a traced step.
struct Twins {
  StepMlp eager, traced;
  Twins() { traced.load_state_dict(eager.state_dict()); }
  // With `grads` false the weights alone (after tracing, before any step: tracing must not
  // train, and there are no gradients yet).
  void expect_same(bool grads = true) {
    auto a = eager.named_parameters(), b = traced.named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(a[i].first);
      test::expect_same(b[i].second, a[i].second);
      if (grads) test::expect_same(b[i].second.grad(), a[i].second.grad());
    }
  }
  void expect_same_weights() { expect_same(false); }
};

struct Batch {
  Tensor x, y;
};
std::vector<Batch> batches(int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back({randn({5, 4}), randint(0, 3, {5})});
  return out;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// How the jit takes part in a step.
enum class Way {
  Traced,    // the whole step is one traced function (forward, backward, update)
  Compiled,  // loss = fast(x, y) with a compiled backward; zero_grad, backward, step eagerly
};

struct StepOptions {
  bool zero_grad_first = true;  // PyTorch's order; else the demo's (zero_grad after the forward)
  bool decay = false;           // the learning rate halves between steps, as a schedule would
  Way way = Way::Traced;
  bool accumulate = false;  // gradients of two batches summed over two calls, then one update
};

Tensor loss_of(StepMlp& net, const Tensor& x, const Tensor& y) { return cross_entropy(net(x), y); }

// Steps the twins alike, eagerly and the way `o` says, with dropout on, and compares the losses,
// the weights and the gradients after every step.
void check_steps(const MakeOptimizer& make, StepOptions o) {
  SCOPED_TRACE(testing::Message() << (o.way == Way::Traced ? "whole step traced" : "compiled loss")
                                  << (o.accumulate ? ", gradients accumulated over two calls" : ""));
  manual_seed(7);
  Twins t;
  auto eager_opt = make(t.eager.parameters()), traced_opt = make(t.traced.parameters());
  // One call's work on one batch: the forward and backward (and, unless accumulating, the
  // zeroing and the update), as the traced function or the eager reference does it.
  auto call = [&o](StepMlp& net, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
    if (o.accumulate) {
      Tensor loss = loss_of(net, x, y);
      loss.backward();
      return loss;
    }
    if (o.zero_grad_first) opt.zero_grad();
    Tensor loss = loss_of(net, x, y);
    if (!o.zero_grad_first) opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  std::vector<Batch> data = batches(8);
  jit::Function fast =
      o.way == Way::Traced
          ? jit::trace([&](Tensor x, Tensor y) { return call(t.traced, *traced_opt, x, y); }, {data[0].x, data[0].y})
          : jit::trace([&](Tensor x, Tensor y) { return loss_of(t.traced, x, y); }, {data[0].x, data[0].y});
  t.expect_same_weights();  // tracing trains nothing
  // The jit's version of `call`.
  auto jit_call = [&](const Tensor& x, const Tensor& y) {
    if (o.way == Way::Traced) return fast(x, y);
    optim::Optimizer& opt = *traced_opt;
    if (!o.accumulate && o.zero_grad_first) opt.zero_grad();
    Tensor loss = fast(x, y);
    EXPECT_EQ(loss.grad_fn_name(), "jit @fn");
    if (!o.accumulate && !o.zero_grad_first) opt.zero_grad();
    loss.backward();
    if (!o.accumulate) opt.step();
    return loss.detach();
  };
  for (size_t i = 0; i + 1 < data.size(); i += 2) {
    SCOPED_TRACE(testing::Message() << "step " << i / 2);
    if (o.decay && i > 0) {
      eager_opt->set_lr(eager_opt->lr() * 0.5);
      traced_opt->set_lr(traced_opt->lr() * 0.5);
    }
    size_t calls = o.accumulate ? 2 : 1;
    std::vector<Tensor> got, want;
    manual_seed(100 + i);  // both twins draw the same dropout masks
    if (o.accumulate) traced_opt->zero_grad();
    for (size_t k = 0; k < calls; ++k) got.push_back(jit_call(data[i + k].x, data[i + k].y));
    if (o.accumulate) traced_opt->step();
    manual_seed(100 + i);
    if (o.accumulate) eager_opt->zero_grad();
    for (size_t k = 0; k < calls; ++k) want.push_back(call(t.eager, *eager_opt, data[i + k].x, data[i + k].y).detach());
    if (o.accumulate) eager_opt->step();
    for (size_t k = 0; k < calls; ++k) expect_same(got[k], want[k]);
    t.expect_same();
  }
  // A traced step that zeroes first never reads the gradients a call starts with: one trace
  // serves every call; otherwise the call without gradients and the ones with them differ. A
  // compiled loss never reads them.
  int64_t traces = o.way == Way::Compiled || (o.zero_grad_first && !o.accumulate) ? 1 : 2;
  EXPECT_EQ(fast.stats().traces, traces);
}

// Every step check runs both ways, with and without accumulation.
void check_steps(const MakeOptimizer& make, bool zero_grad_first = true, bool decay = false) {
  for (Way way : {Way::Traced, Way::Compiled})
    for (bool accumulate : {false, true})
      check_steps(make, {.zero_grad_first = zero_grad_first, .decay = decay, .way = way, .accumulate = accumulate});
}

MakeOptimizer sgd(optim::SgdOptions options) {
  return
      [options](std::vector<Tensor> params) { return std::make_unique<optim::SGD>(std::move(params), 0.1, options); };
}

TEST(TrainStep, SgdStepsMatchEagerSteps) { check_steps(sgd({})); }

TEST(TrainStep, SgdWithMomentumStepsMatchEagerSteps) { check_steps(sgd({.momentum = 0.9})); }

TEST(TrainStep, SgdWithNesterovAndWeightDecayMatchesEagerSteps) {
  check_steps(sgd({.momentum = 0.8, .weight_decay = 0.01, .nesterov = true}));
}

TEST(TrainStep, SgdWithDampeningAndADecayingLearningRateMatchesEagerSteps) {
  check_steps(sgd({.momentum = 0.9, .dampening = 0.3}), true, true);
}

TEST(TrainStep, ZeroGradAfterTheForwardMatchesEagerSteps) { check_steps(sgd({.momentum = 0.5}), false); }

TEST(TrainStep, AdamWithADecayingLearningRateMatchesEagerSteps) {
  check_steps([](std::vector<Tensor> params) { return std::make_unique<optim::Adam>(std::move(params), 0.01); }, false,
              true);
}

TEST(TrainStep, AdamWStepsMatchEagerSteps) {
  check_steps([](std::vector<Tensor> params) { return std::make_unique<optim::AdamW>(std::move(params), 0.01); });
}

TEST(TrainStep, AdamWithL2WeightDecayAndAdamWWithOptionsMatchEagerSteps) {
  check_steps([](std::vector<Tensor> params) {
    return std::make_unique<optim::Adam>(std::move(params), 0.01,
                                         optim::AdamOptions{.beta1 = 0.8, .weight_decay = 0.1});
  });
  check_steps(
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::AdamW>(std::move(params), 0.02, optim::AdamWOptions{.eps = 1e-6});
      },
      true, true);
}

// A step that calls backward() has used its own gradients: a call runs untaped (its forward
// fuses like an inference graph's) and the loss it returns has no gradient history, where
// before each forward op ran eagerly, taped, and the loss kept a live tape.
TEST(TrainStep, AStepThatCallsBackwardRunsUntapedAndFused) {
  manual_seed(10);
  Twins t;
  optim::SGD eager_opt(t.eager.parameters(), 0.1), traced_opt(t.traced.parameters(), 0.1);
  auto step = test::train_step<StepMlp>;
  std::vector<Batch> data = batches(3);
  auto fast = jit::trace([&](Tensor x, Tensor y) { return step(t.traced, traced_opt, x, y); }, {data[0].x, data[0].y});
  for (const Batch& b : data) {
    manual_seed(3);
    Tensor loss = fast(b.x, b.y);
    manual_seed(3);
    expect_same(loss, step(t.eager, eager_opt, b.x, b.y));
    t.expect_same();
    EXPECT_FALSE(loss.requires_grad());
    test::expect_error([&] { loss.backward(); }, {"backward", "does not require grad"});
  }
  if (!jit::fusion_enabled()) return;
  // The forward's bias add and relu share a kernel (a taped op would be kept out of groups).
  std::string text = test::text_of(fast.graph());
  bool fused_relu = false;
  for (size_t at = text.find("= fused"); at != std::string::npos; at = text.find("= fused", at + 1)) {
    size_t end = text.find("yield", at);
    fused_relu = fused_relu || text.substr(at, end - at).find(" = relu ") != std::string::npos;
  }
  EXPECT_TRUE(fused_relu) << text;
}

TEST(TrainStep, GradientsAccumulateAcrossCallsWithoutZeroGrad) {
  manual_seed(8);
  Twins t;
  auto step = [](StepMlp& net, const Tensor& x, const Tensor& y) {
    Tensor loss = cross_entropy(net(x), y);
    loss.backward();
    return loss;
  };
  std::vector<Batch> data = batches(4);
  auto fast = jit::trace([&](Tensor x, Tensor y) { return step(t.traced, x, y); }, {data[0].x, data[0].y});
  t.expect_same_weights();
  for (const auto& [name, p] : t.traced.named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;
  for (size_t i = 0; i < data.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "call " << i);
    manual_seed(i);
    Tensor got = fast(data[i].x, data[i].y);
    manual_seed(i);
    expect_same(got, step(t.eager, data[i].x, data[i].y));
    t.expect_same();
  }
  EXPECT_EQ(fast.stats().traces, 2);  // the first call had no gradients to add to
}

TEST(TrainStep, ManualUpdateUnderNoGradHappensOnEveryCall) {
  manual_seed(9);
  Tensor w = randn({3}).requires_grad_();
  auto step = [&](Tensor x) {
    w.zero_grad();
    Tensor loss = (w * x).pow(2.0).sum();
    loss.backward();
    NoGradGuard no_grad;
    w.sub_(w.grad() * 0.05);
    return loss;
  };
  Tensor w0 = w.detach().clone();
  Tensor x = randn({3});
  auto fast = jit::trace(step, {x});
  EXPECT_TRUE(allclose(w.detach(), w0, 0, 0)) << "tracing updated the weights";
  for (int i = 0; i < 3; ++i) fast(x);
  // Three updates, each from the gradient at the current weights.
  Tensor want = w0;
  for (int i = 0; i < 3; ++i) want = want - (2.0 * want * x * x) * 0.05;
  EXPECT_TRUE(allclose(w.detach(), want, 1e-5, 1e-6)) << w << "\n" << want;
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().has_storage());
}

TEST(TrainStep, GradientsTheFunctionDropsAreDroppedOnEveryCall) {
  Tensor used = randn({2}).requires_grad_(), unused = randn({2}).requires_grad_();
  auto step = [&](Tensor x) {
    used.zero_grad();
    unused.zero_grad();  // never used otherwise: its gradient still goes on every call
    Tensor loss = (used * x).sum();
    loss.backward();
    return loss;
  };
  Tensor x = randn({2});
  auto fast = jit::trace(step, {x});
  for (int i = 0; i < 3; ++i) {
    unused.set_grad(ones({2}));
    used.set_grad(ones({2}));
    fast(x);
    EXPECT_FALSE(unused.grad().defined());
    expect_same(used.grad(), x);
  }
  EXPECT_EQ(fast.stats().traces, 1);
}

}  // namespace
}  // namespace kiln
