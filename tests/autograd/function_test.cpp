// tests/autograd/function_test.cpp -- custom autograd functions eagerly (autograd/function.h):
// each checked by finite differences (gradcheck) or against its own rule where that rule is
// not the derivative (a straight-through estimator); saved tensors and their version check,
// saved outputs under create_graph, needs_input_grad, several outputs, non-differentiable
// ones, materialized grads, inputs changed in place, and the errors a wrong backward gets.
// Traced use is in tests/jit/custom_function_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/autograd/custom_functions.h"
#include "tests/unit/test_util.h"

using namespace kiln;
using autograd::AutogradContext;
using autograd::tensor_list;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::RoundSte;

namespace {

Tensor grad_leaf(const std::vector<double>& v) {
  Tensor t = from_vector(v, Dims{static_cast<int64_t>(v.size())});
  t.requires_grad_();
  return t;
}

// x^3, with its derivative written by hand from the saved input.
struct Cube : autograd::Function<Cube> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    Tensor x = ctx->get_saved_variables()[0];
    return {g[0] * 3 * x * x};
  }
};

// exp(x), whose backward reads the saved output.
struct ExpFn : autograd::Function<ExpFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor y = exp(x);
    ctx->save_for_backward({y});
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {g[0] * ctx->get_saved_variables()[0]}; }
};

// What the last ScaledAdd saw of needs_input_grad, per argument, in its forward and backward.
std::vector<bool> g_forward_needs, g_backward_needs;

// alpha * a + b: a number among the arguments, kept in saved_data.
struct ScaledAdd : autograd::Function<ScaledAdd> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b, double alpha) {
    ctx->saved_data["alpha"] = alpha;
    g_forward_needs = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    return a * alpha + b;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    double alpha = ctx->saved_data["alpha"].to_double();
    g_backward_needs = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    EXPECT_TRUE(ctx->needs_input_grad({1, 0}));
    return {ctx->needs_input_grad(0) ? g[0] * alpha : Tensor(), ctx->needs_input_grad(1) ? g[0] : Tensor(), Tensor()};
  }
};

// The maximum of each row and where it is: the index is an output without a gradient.
struct RowMax : autograd::Function<RowMax> {
  static tensor_list forward(AutogradContext* ctx, const Tensor& x) {
    Tensor index = argmax(x, 1, /*keepdim=*/true);
    Tensor value = gather(x, 1, index);
    ctx->mark_non_differentiable({index});
    ctx->save_for_backward({index});
    ctx->saved_data["shape"] = std::vector<int64_t>(x.shape().begin(), x.shape().end());
    return {value, index};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    Tensor index = ctx->get_saved_variables()[0];
    const std::vector<int64_t>& shape = ctx->saved_data["shape"].to_int_list();
    return {scatter_add(zeros(Dims(shape), g[0].dtype()), 1, index, g[0])};
  }
};

TEST(CustomFunction, ACubeMatchesFiniteDifferences) {
  manual_seed(1);
  Tensor x = randn({3, 4}, f64).requires_grad_();
  std::string failure = autograd::gradcheck([](std::span<const Tensor> in) { return Cube::apply(in[0]); }, {&x, 1});
  EXPECT_EQ(failure, "");
  Tensor y = Cube::apply(x);
  EXPECT_EQ(y.grad_fn_name(), "(anonymous namespace)::CubeBackward");
  EXPECT_TRUE(y.requires_grad());
}

TEST(CustomFunction, IsOneNodeOnTheTape) {
  Tensor x = grad_leaf({1, -2, 3});
  Tensor y = Cube::apply(x);
  y.sum().backward();
  expect_close(x.grad(), {3, 12, 27}, 1e-12);
  // The backward ran the user's rule once: one node, whose saved tensors are then freed.
  expect_error([&] { y.sum().backward(); }, {"CubeBackward", "retain_graph=true"});
}

TEST(CustomFunction, AStraightThroughEstimatorUsesItsOwnRule) {
  Tensor x = grad_leaf({-1.7, -0.4, 0.2, 0.6, 1.3});
  Tensor y = RoundSte::apply(x);
  expect_close(y.detach(), {-2, -0, 0, 1, 1}, 0);
  (y * from_vector(std::vector<double>{1, 2, 3, 4, 5}, {5})).sum().backward();
  expect_close(x.grad(), {0, 2, 3, 4, 0}, 0);
}

TEST(CustomFunction, NumbersAmongTheArgumentsAndNeedsInputGrad) {
  Tensor a = grad_leaf({1, 2}), b = from_vector(std::vector<double>{3, 4}, {2});  // b needs none
  Tensor y = ScaledAdd::apply(a, b, 2.5);
  EXPECT_EQ(g_forward_needs, (std::vector<bool>{true, false, false}));
  expect_close(y.detach(), {5.5, 9}, 1e-12);
  y.sum().backward();
  EXPECT_EQ(g_backward_needs, (std::vector<bool>{true, false, false}));
  expect_close(a.grad(), {2.5, 2.5}, 1e-12);
  EXPECT_FALSE(b.grad().defined());
  // The positions are the arguments': b's is 1 also when a needs no gradient.
  Tensor a2 = from_vector(std::vector<double>{1}, {1}), b2 = grad_leaf({2});
  ScaledAdd::apply(a2, b2, 1.0).sum().backward();
  EXPECT_EQ(g_forward_needs, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(g_backward_needs, (std::vector<bool>{false, true, false}));
  expect_close(b2.grad(), {1}, 0);
}

TEST(CustomFunction, GradcheckWithSeveralInputs) {
  manual_seed(2);
  Tensor a = randn({2, 3}, f64).requires_grad_(), b = randn({3}, f64).requires_grad_();
  std::vector<Tensor> in{a, b};
  EXPECT_EQ(autograd::gradcheck([](std::span<const Tensor> t) { return ScaledAdd::apply(t[0], t[1], -0.75); }, in), "");
}

TEST(CustomFunction, NonDifferentiableOutputsAndMaterializedGrads) {
  Tensor x = from_vector(std::vector<double>{1, 5, 2, 7, 3, 0}, {2, 3}).requires_grad_();
  tensor_list out = RowMax::apply(x);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());  // the index
  EXPECT_EQ(out[1].dtype(), DType::I64);
  out[0].sum().backward();
  expect_close(x.grad(), {0, 1, 0, 1, 0, 0}, 0);
  std::vector<double> xv{1, 5, 2, 7, 3, 0};
  Tensor x64 = from_vector(xv, {2, 3}).requires_grad_();
  EXPECT_EQ(autograd::gradcheck([](std::span<const Tensor> t) { return RowMax::apply(t[0])[0]; }, {&x64, 1}), "");
}

// Whether the last SplitHalves backward got a defined gradient for its second output.
bool g_second_defined = false;

// Two outputs; the gradient of the one the loss does not read is zeros, or undefined.
struct SplitHalves : autograd::Function<SplitHalves> {
  static tensor_list forward(AutogradContext* ctx, const Tensor& x, bool materialize) {
    ctx->set_materialize_grads(materialize);
    ctx->saved_data["n"] = x.shape()[0];
    return {x.slice(0, 0, 2).clone(), x.slice(0, 2, 4).clone()};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    g_second_defined = g[1].defined();
    if (g_second_defined) expect_close(g[1], {0, 0}, 0);
    Tensor second = g[1].defined() ? g[1] : zeros({2}, g[0].dtype());
    return {cat({g[0], second}, 0), Tensor()};
  }
};

TEST(CustomFunction, AnOutputNoGradientReachedGetsZerosOrUndefined) {
  for (bool materialize : {true, false}) {
    Tensor x = grad_leaf({1, 2, 3, 4});
    tensor_list halves = SplitHalves::apply(x, materialize);
    (halves[0] * 2).sum().backward();
    EXPECT_EQ(g_second_defined, materialize);
    expect_close(x.grad(), {2, 2, 0, 0}, 0);
  }
}

TEST(CustomFunction, SecondDerivativesThroughTheUsersBackward) {
  Tensor x = grad_leaf({-1.5, 0.25, 2});
  Tensor g = autograd::grad({Cube::apply(x).sum()}, {x}, {}, false, /*create_graph=*/true)[0];
  EXPECT_TRUE(g.requires_grad());
  expect_close(g, {6.75, 0.1875, 12}, 1e-12);
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  expect_close(gg, {-9, 1.5, 12}, 1e-12);
}

TEST(CustomFunction, ASavedOutputCarriesItsHistoryUnderCreateGraph) {
  std::vector<double> xv{-1, 0.5, 2};
  Tensor x = grad_leaf(xv);
  Tensor g = autograd::grad({ExpFn::apply(x).sum()}, {x}, {}, false, true)[0];
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  std::vector<double> want;
  for (double v : xv) want.push_back(std::exp(v));
  expect_close(g.detach(), want, 1e-12);
  expect_close(gg, want, 1e-12);
}

TEST(CustomFunction, ASavedTensorChangedInPlaceIsCaught) {
  Tensor x = grad_leaf({1, 2});
  Tensor h = x * 1;  // not a leaf: it may change in place
  Tensor y = Cube::apply(h);
  {
    NoGradGuard no_grad;
    h.add_(1);
  }
  expect_error([&] { y.sum().backward(); }, {"CubeBackward", "modified by an in-place op", "version"});
}

// Doubles its input in place and returns it.
struct DoubleInPlace : autograd::Function<DoubleInPlace> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    x.mul_(2);
    ctx->mark_dirty({x});
    return x;
  }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0] * 2}; }
};

TEST(CustomFunction, AnInputChangedInPlaceTakesTheFunctionsHistory) {
  Tensor x = grad_leaf({1, 3});
  Tensor h = x * x;
  Tensor same = DoubleInPlace::apply(h);
  EXPECT_EQ(same.impl(), h.impl());
  EXPECT_EQ(h.grad_fn_name(), "(anonymous namespace)::DoubleInPlaceBackward");
  expect_close(h.detach(), {2, 18}, 0);
  h.sum().backward();
  expect_close(x.grad(), {4, 12}, 1e-12);  // d(2x^2)/dx
  Tensor l = grad_leaf({1});
  expect_error([&] { DoubleInPlace::apply(l); }, {"DoubleInPlace", "leaf that requires grad"});
}

struct Identity : autograd::Function<Identity> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0] * 10}; }
};

TEST(CustomFunction, AnInputReturnedAsItIsBecomesANewTensor) {
  Tensor x = grad_leaf({1, 2});
  Tensor h = x * 1;
  Tensor y = Identity::apply(h);
  EXPECT_NE(y.impl(), h.impl());
  EXPECT_EQ(h.grad_fn_name(), "mul");
  (y + h).sum().backward();
  expect_close(x.grad(), {11, 11}, 0);
}

TEST(CustomFunction, WithoutGradModeNoNodeIsRecorded) {
  Tensor x = grad_leaf({1, 2});
  NoGradGuard no_grad;
  Tensor y = Cube::apply(x);
  EXPECT_FALSE(y.requires_grad());
  expect_close(y, {1, 8}, 0);
}

struct TooFew : autograd::Function<TooFew> {
  static Tensor forward(AutogradContext*, const Tensor& a, const Tensor& b) { return a * b; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0]}; }
};
struct WrongShape : autograd::Function<WrongShape> {
  static Tensor forward(AutogradContext*, const Tensor& a) { return a * 2; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {cat({g[0], g[0]}, 0)}; }
};
struct GradForANumber : autograd::Function<GradForANumber> {
  static Tensor forward(AutogradContext*, const Tensor& a, double s) { return a * s; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], g[0]}; }
};
struct Broadcast : autograd::Function<Broadcast> {
  static Tensor forward(AutogradContext*, const Tensor& a) { return a * 1; }
  // A gradient broadcast to more rows than the input has: summed back to its shape.
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0].expand({3, 2})}; }
};

TEST(CustomFunction, AWrongBackwardGetsAnErrorThatNamesIt) {
  Tensor a = grad_leaf({1, 2}), b = grad_leaf({3, 4});
  expect_error([&] { TooFew::apply(a, b).sum().backward(); }, {"TooFew", "returned 1 gradients", "took 2 arguments"});
  expect_error([&] { WrongShape::apply(a).sum().backward(); }, {"WrongShape", "f64[4]", "f64[2]", "shapes must match"});
  expect_error([&] { GradForANumber::apply(a, 2.0).sum().backward(); },
               {"GradForANumber", "argument 1", "not a tensor"});
  a.zero_grad();
  Broadcast::apply(a).sum().backward();
  expect_close(a.grad(), {3, 3}, 0);
}

TEST(CustomFunction, SavedDataSaysWhatItHolds) {
  autograd::SavedValue v(int64_t{3});
  EXPECT_EQ(v.to_int(), 3);
  EXPECT_EQ(v.to_double(), 3.0);
  expect_error([&] { v.to_string(); }, {"saved_data", "a string", "holds int"});
  autograd::SavedValue t(ones({2}));
  EXPECT_EQ(t.to_tensor().numel(), 2);
  EXPECT_STREQ(autograd::SavedValue().kind(), "none");
}

}  // namespace
