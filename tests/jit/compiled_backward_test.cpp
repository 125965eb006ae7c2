// tests/jit/compiled_backward_test.cpp -- fast(x) with gradients: one compiled forward, its
// results hanging off one autograd node whose backward runs a compiled backward graph; every
// behaviour of eager autograd kept (accumulation, retain_graph, version checks, grad()).
#include "jit_test_util.h"

namespace kiln {
namespace {

using test::expect_same;

struct BackwardMlp : nn::Module {
  nn::Linear fc1{6, 16}, fc2{16, 3};
  BackwardMlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(gelu(fc1(x))); }
};

struct Twins {
  BackwardMlp eager, compiled;
  Twins() { compiled.load_state_dict(eager.state_dict()); }
  void expect_same_grads() {
    auto a = eager.named_parameters(), b = compiled.named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(a[i].first);
      ASSERT_TRUE(b[i].second.grad().defined());
      expect_same(b[i].second.grad(), a[i].second.grad());
    }
  }
};

TEST(CompiledBackward, GradientsOfAModuleMatchEagerAndAccumulate) {
  manual_seed(3);
  Twins t;
  auto loss_of = [](BackwardMlp& m, const Tensor& x, const Tensor& y) { return cross_entropy(m(x), y); };
  Tensor x = randn({5, 6}), y = randint(0, 3, {5});
  auto fast = jit::trace([&](Tensor a, Tensor b) { return loss_of(t.compiled, a, b); }, {x, y});
  for (int call = 0; call < 2; ++call) {  // the second call accumulates into grad()
    SCOPED_TRACE(testing::Message() << "call " << call);
    Tensor x2 = randn({5, 6}), y2 = randint(0, 3, {5});
    Tensor got = fast(x2, y2), want = loss_of(t.eager, x2, y2);
    expect_same(got.detach(), want.detach());
    EXPECT_EQ(got.grad_fn_name(), "jit @fn");
    got.backward();
    want.backward();
    t.expect_same_grads();
  }
  EXPECT_EQ(fast.stats().traces, 1);
  EXPECT_GT(fast.stats().saved_bytes, 0);
}

TEST(CompiledBackward, ArgumentGradientsAndOnlyForInputsThatRequireGrad) {
  Tensor w = randn({4, 3});  // captured, not requiring grad: gets none
  auto fn = [&](Tensor a, Tensor b) { return sum(tanh(matmul(a, w)) * b); };
  Tensor a = randn({2, 4}).requires_grad_(), b = randn({2, 3});
  auto fast = jit::trace(fn, {a, b});
  fast(a, b).backward();
  Tensor compiled = a.grad();
  a.zero_grad();
  fn(a, b).backward();
  expect_same(compiled, a.grad());
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

TEST(CompiledBackward, NonLeafInputsPassGradientsOn) {
  Tensor leaf = randn({3, 4}).requires_grad_();
  auto fn = [](Tensor x) { return sum(exp(x) * x); };
  auto fast = jit::trace(fn, {leaf * 2});
  fast(leaf * 2).backward();
  Tensor compiled = leaf.grad();
  leaf.zero_grad();
  fn(leaf * 2).backward();
  expect_same(compiled, leaf.grad());
}

TEST(CompiledBackward, SeveralResultsAndAutogradGrad) {
  Tensor x = randn({4, 5}).requires_grad_();
  auto fn = [](Tensor a) { return std::make_tuple(sigmoid(a) * a, sum(a * a, {1})); };
  auto fast = jit::trace(fn, {x});
  auto outs = fast.call(std::vector<Tensor>{x});
  auto [e0, e1] = fn(x);
  Tensor g0 = randn({4, 5}), g1 = randn({4});
  // Both results, through grad(); then only the second (the first's gradient is zero).
  std::vector<Tensor> got = autograd::grad({outs[0], outs[1]}, {x}, {g0, g1}, true);
  std::vector<Tensor> want = autograd::grad({e0, e1}, {x}, {g0, g1}, true);
  expect_same(got[0], want[0]);
  got = autograd::grad({outs[1]}, {x}, {g1});
  want = autograd::grad({e1}, {x}, {g1});
  expect_same(got[0], want[0]);
}

TEST(CompiledBackward, RetainGraphAndASecondBackwardThrowAsEagerly) {
  Tensor x = randn({3}).requires_grad_();
  auto fast = jit::trace([](Tensor a) { return sum(exp(a)); }, {x});
  Tensor loss = fast(x);
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();
  expect_same(x.grad(), exp(x.detach()) * 2);
  test::expect_error([&] { loss.backward(); }, {"a second time"});
}

TEST(CompiledBackward, ModifyingASavedTensorInPlaceThrows) {
  Tensor x = randn({3}).requires_grad_();
  Tensor c = randn({3});
  auto fast = jit::trace([](Tensor a, Tensor b) { return sum(a * b); }, {x, c});
  Tensor loss = fast(x, c);
  c.mul_(2);
  test::expect_error([&] { loss.backward(); }, {"modified by an in-place op"});
}

TEST(CompiledBackward, NoGradUsesTheInferencePlan) {
  Tensor x = randn({3}).requires_grad_();
  auto fast = jit::trace([](Tensor a) { return exp(a); }, {x});
  Tensor y;
  {
    NoGradGuard no_grad;
    y = fast(x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(fast(x).requires_grad());
  EXPECT_EQ(fast.stats().traces, 2);  // grad mode is part of the signature
}

TEST(CompiledBackward, CreateGraphThroughACompiledFunctionSaysWhatToDo) {
  Tensor x = randn({3}).requires_grad_();
  auto fast = jit::trace([](Tensor a) { return sum(exp(a)); }, {x});
  test::expect_error([&] { autograd::grad({fast(x)}, {x}, {}, false, /*create_graph=*/true); },
                     {"create_graph=true reached jit @fn"});
}

TEST(CompiledBackward, AFunctionWithSideEffectsStaysTaped) {
  // An in-place update of captured state cannot be split from its gradient: the ops are taped
  // as before, and backward still gives eager's gradients.
  Tensor w = randn({3}).requires_grad_();
  Tensor counter = zeros({});
  auto fn = [&](Tensor a) {
    {
      NoGradGuard no_grad;
      counter.add_(1);
    }
    return sum(a * w);
  };
  Tensor x = randn({3});
  auto fast = jit::trace(fn, {x});
  Tensor loss = fast(x);
  EXPECT_NE(loss.grad_fn_name(), "jit @fn");
  loss.backward();
  expect_same(w.grad(), x);
  EXPECT_EQ(counter.item<float>(), 1.0f);
}

}  // namespace
}  // namespace kiln
