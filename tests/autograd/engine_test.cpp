// tests/autograd/engine_test.cpp -- the backward engine: accumulation, retain/create_graph,
// autograd::grad, grad modes, detach, graph shapes (diamonds, deep chains, broadcasting) and
// gradient dtypes. Per-op derivative rules are checked in op_gradcheck_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

Tensor leaf(const std::vector<double>& v, const Dims& shape = {}) {
  Tensor t = from_vector(v, shape.size() ? shape : Dims{static_cast<int64_t>(v.size())});
  t.requires_grad_();
  return t;
}

std::vector<double> map(const std::vector<double>& v, double (*f)(double)) {
  std::vector<double> out;
  for (double x : v) out.push_back(f(x));
  return out;
}

}  // namespace

TEST(Engine, BackwardOnAScalarFillsLeafGradients) {
  std::vector<double> xv{1, -2, 3.5};
  Tensor x = leaf(xv);
  Tensor y = (x * x).sum();
  EXPECT_EQ(y.dim(), 0);
  EXPECT_FALSE(x.grad().defined());
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().shape(), x.shape());
  expect_close(x.grad(), {2, -4, 7}, 1e-12);
  EXPECT_FALSE(x.grad().requires_grad());  // without create_graph the gradient has no history
}

TEST(Engine, GradientsAccumulateAcrossBackwardCallsUntilZeroGrad) {
  Tensor x = leaf({1, 2, 3});
  Tensor w = leaf({0.5, -1, 2});
  (x * w).sum().backward();
  expect_close(x.grad(), {0.5, -1, 2}, 1e-12);
  (x * w).sum().backward();  // a new graph; grads add up
  expect_close(x.grad(), {1, -2, 4}, 1e-12);
  expect_close(w.grad(), {2, 4, 6}, 1e-12);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());  // zero_grad touches only its tensor
  (x * 3.0).sum().backward();
  expect_close(x.grad(), {3, 3, 3}, 1e-12);
}

TEST(Engine, BackwardOnANonScalarTakesAGradient) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = x * x;  // dy/dx = 2x, times the given gradient
  y.backward(from_vector<double>({1, 0, -1, 0.5}, {2, 2}));
  expect_close(x.grad(), {2, 0, -6, 4}, 1e-12);
}

TEST(Engine, BackwardOnANonScalarWithoutAGradientThrows) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  expect_error([&] { y.backward(); }, {"backward", "3 elements", "pass a gradient"});
  expect_error([&] { y.backward(from_vector<double>({1, 2})); }, {"backward", "does not match"});
  EXPECT_FALSE(x.grad().defined());
}

TEST(Engine, BackwardOnATensorWithoutHistoryThrows) {
  Tensor x = from_vector<double>({1, 2});
  expect_error([&] { (x * 2.0).sum().backward(); }, {"backward", "does not require grad"});
}

TEST(Engine, ASecondBackwardWithoutRetainGraphThrows) {
  Tensor x = leaf({0.5, 1});
  Tensor y = x.exp().sum();
  y.backward();
  expect_close(x.grad(), {std::exp(0.5), std::exp(1.0)}, 1e-12);
  expect_error([&] { y.backward(); }, {"backward", "retain_graph"});
}

TEST(Engine, RetainGraphAllowsASecondBackwardThatDoublesTheGradient) {
  Tensor x = leaf({0.5, 1, -1});
  Tensor y = (x.exp() * x).sum();  // d/dx = e^x (1 + x)
  y.backward({}, /*retain_graph=*/true);
  std::vector<double> once;
  for (double v : {0.5, 1.0, -1.0}) once.push_back(std::exp(v) * (1 + v));
  expect_close(x.grad(), once, 1e-12);
  y.backward({}, /*retain_graph=*/true);
  std::vector<double> twice;
  for (double v : once) twice.push_back(2 * v);
  expect_close(x.grad(), twice, 1e-12);
  y.backward();  // the last one may free the graph
  expect_error([&] { y.backward(); }, {"retain_graph"});
}

TEST(Engine, CreateGraphGivesSecondDerivativeOfACube) {
  std::vector<double> xv{-1.5, 0.25, 2};
  Tensor x = leaf(xv);
  Tensor y = x.pow(3).sum();
  std::vector<Tensor> g = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_TRUE(g[0].requires_grad());
  std::vector<double> d1, d2;
  for (double v : xv) d1.push_back(3 * v * v), d2.push_back(6 * v);
  expect_close(g[0], d1, 1e-12);
  std::vector<Tensor> gg = autograd::grad({g[0].sum()}, {x});
  expect_close(gg[0], d2, 1e-12);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Engine, CreateGraphGivesSecondDerivativeOfSine) {
  std::vector<double> xv{-2, -0.3, 0.7, 3};
  Tensor x = leaf(xv);
  Tensor g = autograd::grad({sin(x).sum()}, {x}, {}, false, true)[0];
  expect_close(g, map(xv, [](double v) { return std::cos(v); }), 1e-12);
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  expect_close(gg, map(xv, [](double v) { return -std::sin(v); }), 1e-12);
}

TEST(Engine, BackwardWithCreateGraphLeavesADifferentiableGrad) {
  std::vector<double> xv{1, -2};
  Tensor x = leaf(xv);
  (x * x * x).sum().backward({}, false, /*create_graph=*/true);
  ASSERT_TRUE(x.grad().requires_grad());
  expect_close(x.grad(), {3, 12}, 1e-12);
  Tensor g2 = autograd::grad({x.grad().sum()}, {x})[0];
  expect_close(g2, {6, -12}, 1e-12);
  // x.grad()'s graph holds x: a cycle (autograd.h) that only resetting the grad breaks
  // (LeakSanitizer reports it otherwise).
  x.set_grad({});
}

TEST(Engine, GradWithRespectToANonLeaf) {
  Tensor x = leaf({1, 2, 3});
  Tensor h = x * 2.0;
  Tensor y = (h * h).sum();
  std::vector<Tensor> g = autograd::grad({y}, {h, x});
  expect_close(g[0], {4, 8, 12}, 1e-12);   // 2h
  expect_close(g[1], {8, 16, 24}, 1e-12);  // 8x
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(h.grad().defined());
}

// grad() runs only the nodes that lead to its inputs (as PyTorch's engine): what made h is
// neither run nor freed, so a backward through it still works after a grad() that freed the
// rest of its graph.
TEST(Engine, GradRunsOnlyTheNodesLeadingToItsInputs) {
  Tensor x = leaf({1, 2, 3});
  Tensor h = x.exp();
  Tensor y = (h * 3.0).sum();
  std::vector<Tensor> g = autograd::grad({y}, {h});
  expect_close(g[0], {3, 3, 3}, 1e-12);
  expect_error([&] { autograd::grad({y}, {h}); }, {"a second time"});  // y's own nodes were freed
  h.sum().backward();                                                  // exp's node was not run, so not freed
  expect_close(x.grad(), {std::exp(1.0), std::exp(2.0), std::exp(3.0)}, 1e-12);
}

TEST(Engine, GradOfAnUnusedInputThrowsUnlessAllowUnused) {
  Tensor x = leaf({1, 2});
  Tensor z = leaf({5, 6});
  Tensor y = (x * x).sum();
  expect_error([&] { autograd::grad({y}, {x, z}, {}, true); }, {"grad", "input 1", "allow_unused"});
  std::vector<Tensor> g = autograd::grad({y}, {x, z}, {}, false, false, /*allow_unused=*/true);
  expect_close(g[0], {2, 4}, 1e-12);
  EXPECT_FALSE(g[1].defined());
  Tensor plain = from_vector<double>({1.0});
  expect_error([&] { autograd::grad({y}, {plain}); }, {"grad", "does not require grad"});
}

TEST(Engine, GradDoesNotTouchLeafGrads) {
  Tensor x = leaf({1, 2});
  x.set_grad(from_vector<double>({10, 20}));
  std::vector<Tensor> g = autograd::grad({(x * 3.0).sum()}, {x});
  expect_close(g[0], {3, 3}, 1e-12);
  expect_close(x.grad(), {10, 20}, 0);
}

TEST(Engine, GradWithGradOutputsWeightsEachOutput) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 2.0, b = x * x;
  std::vector<Tensor> g = autograd::grad({a, b}, {x}, {from_vector<double>({1, 1}), from_vector<double>({3, -1})});
  expect_close(g[0], {2 + 3 * 2, 2 - 1 * 4}, 1e-12);
}

TEST(Engine, BackwardFromSeveralOutputsAndFromALeaf) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 3.0, b = x * x;
  std::vector<Tensor> outs{a, b}, grads{from_vector<double>({1, 2}), from_vector<double>({1, 1})};
  autograd::backward(outs, grads);
  expect_close(x.grad(), {3 + 2, 6 + 4}, 1e-12);
  Tensor w = leaf({5, 6});
  w.backward(from_vector<double>({0.5, 2}));  // a leaf's own gradient is the one given
  expect_close(w.grad(), {0.5, 2}, 0);
  expect_error([&] { autograd::backward(outs, std::vector<Tensor>{grads[0]}); },
               {"backward", "1 gradients given for 2 outputs"});
}

TEST(Engine, NoGradGuardStopsRecordingAndEnableGradGuardRestartsIt) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    EXPECT_EQ(y.grad_fn_name(), "");
    expect_close(y, {2, 4}, 0);
    {
      EnableGradGuard enable;
      EXPECT_TRUE(is_grad_enabled());
      Tensor z = x * 3.0;
      EXPECT_TRUE(z.requires_grad());
      z.sum().backward();
    }
    EXPECT_FALSE(is_grad_enabled());
    {
      NoGradGuard nested;
      EXPECT_FALSE(is_grad_enabled());
    }
    EXPECT_FALSE(is_grad_enabled());  // the nested guard restores "off", not "on"
  }
  EXPECT_TRUE(is_grad_enabled());
  expect_close(x.grad(), {3, 3}, 1e-12);
}

TEST(Engine, DetachSharesDataButCutsTheGraph) {
  Tensor x = leaf({1, 2, 3});
  Tensor d = (x * 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  Tensor y = x.detach();
  EXPECT_EQ(y.impl()->storage.get(), x.impl()->storage.get());
  // Only the path through x itself contributes: d(sum(x * d))/dx = d.
  (x * d).sum().backward();
  expect_close(x.grad(), {2, 4, 6}, 1e-12);
}

TEST(Engine, RequiresGradOnIntegerTensorsThrows) {
  Tensor i = from_vector<int64_t>({1, 2});
  expect_error([&] { i.requires_grad_(); }, {"requires_grad_", "float", "i64[2]"});
  Tensor b = from_vector<bool>({true});
  expect_error([&] { b.requires_grad_(); }, {"requires_grad_"});
  EXPECT_FALSE(i.requires_grad());
  i.requires_grad_(false);  // turning it off is always allowed on a leaf
}

TEST(Engine, IsLeafAndGradFnName) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  EXPECT_EQ(x.grad_fn_name(), "");
  Tensor y = x * x;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn_name(), "mul");
  EXPECT_EQ(x.exp().grad_fn_name(), "exp");
  EXPECT_EQ(y.sum().grad_fn_name(), "sum");
  expect_error([&] { y.requires_grad_(false); }, {"requires_grad_", "mul", "detach"});
  Tensor plain = from_vector<double>({1.0});
  EXPECT_TRUE(plain.is_leaf());
  EXPECT_FALSE(plain.requires_grad());
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
}

TEST(Engine, ADiamondSumsBothPaths) {
  std::vector<double> xv{1, -2, 0.5};
  Tensor x = leaf(xv);
  Tensor a = x * 2.0, b = sin(x);
  Tensor y = (a * b).sum();  // 2x sin x -> 2 sin x + 2x cos x
  y.backward();
  std::vector<double> want;
  for (double v : xv) want.push_back(2 * std::sin(v) + 2 * v * std::cos(v));
  expect_close(x.grad(), want, 1e-12);
}

TEST(Engine, ATensorUsedManyTimesByOneOpGetsEveryContribution) {
  Tensor x = leaf({3});
  (x * x * x * x).sum().backward();  // 4x^3
  expect_close(x.grad(), {108}, 1e-12);
}

TEST(Engine, ADeepChainRunsWithoutStackOverflow) {
  Tensor x = leaf({1, 2});
  Tensor y = x;
  const int n = 2000;
  for (int i = 0; i < n; ++i) y = y * 1.001 + 0.0;
  y.sum().backward();
  double g = std::pow(1.001, n);
  expect_close(x.grad(), {g, g}, 0, 1e-9);
}

TEST(Engine, AVeryDeepChainIsBuiltAndFreedWithoutStackOverflow) {
  // Neither the backward walk nor freeing the graph may recurse once per node.
  Tensor x = leaf({0.5});
  const int n = 200000;
  {
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = y + 1.0;  // links through edges only
    y.sum().backward();
    expect_close(y, {0.5 + n}, 0);
  }
  expect_close(x.grad(), {1}, 0);
  {
    Tensor y = x;  // sin saves its input, so earlier nodes are also held by saved tensors
    for (int i = 0; i < n; ++i) y = sin(y);
  }  // dropped without backward
  {
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = tanh(y);  // saves its output
    y.sum().backward({}, /*retain_graph=*/true);
  }  // dropped with every saved tensor still held
}

TEST(Engine, AGraphDroppedWithoutBackwardFreesItsTensors) {
  // Rules that save their output (exp, sqrt) must not keep that output, and with it their own
  // node, alive: a forward pass that is never differentiated frees everything.
  Tensor x = leaf({1, 2});
  Ref<Storage> a, b;
  {
    Tensor y = x.exp();
    Tensor z = sqrt(y) * y;
    a = y.impl()->storage;
    b = z.impl()->storage;
  }
  EXPECT_EQ(a->use_count(), 1);
  EXPECT_EQ(b->use_count(), 1);
  {
    Tensor y = tanh(x);
    Tensor z = (y * y).sum();
    z.backward({}, /*retain_graph=*/true);  // keeps the saved tensors, until the graph goes
    a = y.impl()->storage;
  }
  EXPECT_EQ(a->use_count(), 1);
}

TEST(Engine, BroadcastGradientsSumBackToEachInputShape) {
  Tensor a = leaf({1, 2, 3}, {3, 1});
  Tensor b = leaf({10, 20, 30, 40}, {4});
  Tensor y = a * b;  // [3, 4]
  ASSERT_EQ(y.shape(), (Dims{3, 4}));
  y.sum().backward();
  EXPECT_EQ(a.grad().shape(), (Dims{3, 1}));
  EXPECT_EQ(b.grad().shape(), (Dims{4}));
  expect_close(a.grad(), {100, 100, 100}, 1e-12);  // sum of b
  expect_close(b.grad(), {6, 6, 6, 6}, 1e-12);     // sum of a
  Tensor c = leaf({1, 2, 3}, {3, 1});
  Tensor d = leaf({5}, {1});
  (c + d).sum().backward();  // [3,1] + [1]
  EXPECT_EQ(d.grad().shape(), (Dims{1}));
  expect_close(c.grad(), {1, 1, 1}, 0);
  expect_close(d.grad(), {3}, 0);
}

TEST(Engine, GradientDtypesMatchTheirInputs) {
  Tensor x = from_vector<float>({1, 2, 3});
  x.requires_grad_();
  Tensor w = leaf({0.5, 0.25, 2});
  Tensor y = x * w;  // promotes to f64
  EXPECT_EQ(y.dtype(), f64);
  y.sum().backward();
  EXPECT_EQ(x.grad().dtype(), f32);
  EXPECT_EQ(w.grad().dtype(), f64);
  expect_close(x.grad(), {0.5, 0.25, 2}, 0);
  expect_close(w.grad(), {1, 2, 3}, 0);
  Tensor h = from_vector<float>({1, 2});
  h.requires_grad_();
  h.to(f64).sum().backward();
  EXPECT_EQ(h.grad().dtype(), f32);
}

TEST(Engine, IntegerOperandsGetNoGradientButFloatsDo) {
  Tensor x = leaf({1.5, 2});
  Tensor k = from_vector<int64_t>({3, 4});
  (x * k).sum().backward();
  expect_close(x.grad(), {3, 4}, 0);
  EXPECT_FALSE(k.grad().defined());
}

// cat takes any number of operands: those past the 32nd get their gradients too, whichever of
// the others need one (a 32-bit mask of operands once dropped them, or read past its width).
TEST(Engine, CatOfManyOperandsGivesEachItsGradient) {
  std::vector<Tensor> parts;
  for (int i = 0; i < 40; ++i) {
    Tensor p = full({2}, static_cast<double>(i));
    if (i == 3 || i >= 33) p.requires_grad_();
    parts.push_back(p);
  }
  Tensor y = cat(parts, 0);
  (y * y).sum().backward();
  for (int i = 0; i < 40; ++i) {
    if (i == 3 || i >= 33) {
      ASSERT_TRUE(parts[i].grad().defined()) << i;
      expect_close(parts[i].grad(), {2.0 * i, 2.0 * i}, 1e-12);
    } else {
      EXPECT_FALSE(parts[i].grad().defined()) << i;
    }
  }
}
