// tests/jit/custom_function_test.cpp -- custom autograd functions (autograd/function.h) under
// jit::trace: the forward's ops are traced, and the engine running the node's backward on the
// tracer's tensors traces the user's rule, so the compiled backward, a whole traced training
// step and a saved module use that rule (a straight-through estimator, whose rule is not the
// derivative of its forward, tells the two apart), and match eager calls.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "autograd/function.h"
#include "jit/save.h"
#include "jit_test_util.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "tests/autograd/custom_functions.h"

namespace kiln {
namespace {

using autograd::AutogradContext;
using autograd::tensor_list;
using test::expect_same;
using test::RoundSte;

// x^3 * alpha, with its derivative by hand; alpha in saved_data.
struct ScaledCube : autograd::Function<ScaledCube> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double alpha) {
    ctx->save_for_backward({x});
    ctx->saved_data["alpha"] = alpha;
    return x * x * x * alpha;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    Tensor x = ctx->get_saved_variables()[0];
    return {g[0] * x * x * (3 * ctx->saved_data["alpha"].to_double()), Tensor()};
  }
};

TEST(CustomFunctionTraced, TheCompiledBackwardUsesTheUsersRule) {
  manual_seed(5);
  Tensor w = randn({4, 3}).requires_grad_();
  auto fn = [&](Tensor x) { return sum(RoundSte::apply(matmul(x, w)) * ScaledCube::apply(x.sum({1}, true), 0.5)); };
  auto fast = jit::trace(fn, {randn({5, 4}).requires_grad_()});
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(testing::Message() << "call " << call);
    Tensor x = randn({5, 4}).requires_grad_();
    Tensor got = fast(x);
    EXPECT_EQ(got.grad_fn_name(), "jit @fn");
    got.backward();
    Tensor gx = x.grad(), gw = w.grad();
    x.zero_grad(), w.zero_grad();
    Tensor want = fn(x);
    expect_same(got.detach(), want.detach());
    want.backward();
    expect_same(gx, x.grad());
    expect_same(gw, w.grad());
    // The straight-through rule, not round's zero derivative, reached w.
    EXPECT_GT(max(abs(gw)).item<float>(), 0.f);
    w.zero_grad();
  }
  EXPECT_EQ(fast.stats().traces, 1);
}

TEST(CustomFunctionTraced, TheCompiledFunctionMatchesFiniteDifferences) {
  manual_seed(6);
  Tensor x = randn({3, 2}, f64).requires_grad_();
  auto fast = jit::trace([](Tensor a) { return ScaledCube::apply(sin(a), -1.5); }, {x});
  EXPECT_EQ(autograd::gradcheck([&](std::span<const Tensor> in) { return fast(in[0]); }, {&x, 1}), "");
}

// A call that could not be traced with its backward would run its ops taped, and the taped
// ops of a custom function's forward carry none of its rule: refused, saying what to do.
TEST(CustomFunctionTraced, ACallThatWouldLoseTheRuleIsRefused) {
  Tensor w = randn({3}).requires_grad_();
  Tensor calls = zeros({1});
  auto fn = [&](Tensor x) {
    calls.add_(1);  // an in-place write to a captured tensor: no joint trace
    return sum(RoundSte::apply(x * w));
  };
  test::expect_error([&] { jit::trace(fn, {randn({3})})(randn({3})); },
                     {"@fn", "custom autograd function", "RoundSte", "whole training step"});
  // Without gradients the call runs as any other.
  NoGradGuard no_grad;
  auto fast = jit::trace(fn, {randn({3})});
  Tensor x = randn({3});
  expect_same(fast(x), sum(round(x * w)));
}

// A layer, the estimator, a layer: the example's shape of a quantization-aware model.
struct SteNet : nn::Module {
  nn::Linear fc1{6, 8}, fc2{8, 3};
  SteNet() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(RoundSte::apply(fc1(x) * 2)); }
};

TEST(CustomFunctionTraced, AWholeTrainingStepMatchesEagerSteps) {
  manual_seed(7);
  SteNet eager, traced;
  test::expect_traced_steps_match_eager(eager, traced, 4);
  // fc1's weight learns through the estimator (its gradient would be zero through round).
  EXPECT_GT(max(abs(traced.fc1.weight.grad())).item<float>(), 0.f);
}

TEST(CustomFunctionTraced, ASavedStepCarriesTheRuleAsPlainIr) {
  manual_seed(8);
  SteNet net;
  optim::SGD opt(net.parameters(), 0.05);
  auto step = [&](Tensor x, Tensor y) { return test::train_step(net, opt, x, y); };
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 4; ++i) xs.push_back(randn({5, 6})), ys.push_back(randint(0, 3, {5}));
  jit::Function fast = jit::trace(step, {xs[0], ys[0]});
  fast(xs[0], ys[0]);
  std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_custom_fn_" + std::to_string(::getpid()) + ".kiln")).string();
  jit::SaveOptions o;
  o.parameter_names = net.named_parameters();
  jit::save(fast, path, o);
  jit::LoadedFunction loaded = jit::load(path);
  std::remove(path.c_str());
  for (int i = 1; i < 4; ++i) {
    SCOPED_TRACE(testing::Message() << "step " << i);
    Tensor want = fast(xs[i], ys[i]);
    Tensor got = loaded(xs[i], ys[i]);
    EXPECT_TRUE(test::bitwise_equal(got, want)) << got << " vs " << want;
    for (auto& [name, p] : net.named_parameters()) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(test::bitwise_equal(loaded.parameter(name), p));
    }
  }
}

}  // namespace
}  // namespace kiln
