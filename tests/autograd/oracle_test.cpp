// tests/autograd/oracle_test.cpp -- the oracles themselves: gradcheck and allclose must be able
// to fail. Every op's gradient is trusted to gradcheck and every comparison to allclose, so
// each is shown rejecting what it should (a wrong derivative, NaN, a shape, one ulp past its
// bound) beside accepting what it should.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;

namespace {

Tensor point() { return from_vector(std::vector<double>{0.7, -1.3, 2.1}).requires_grad_(); }

// x*x in value, with the derivative `wrong` in place of 2x: the detached terms cancel in value
// and carry no gradient, so backward sees only `wrong`'s graph.
Tensor square_with_derivative(const Tensor& x, const Tensor& wrong_term) {
  return (x * x).detach() + wrong_term - wrong_term.detach();
}

std::string check(const std::function<Tensor(const Tensor&)>& f) {
  Tensor x = point();
  return autograd::gradcheck([&](std::span<const Tensor> in) { return f(in[0]); }, std::vector<Tensor>{x});
}

}  // namespace

TEST(Gradcheck, AcceptsARightDerivative) {
  EXPECT_EQ(check([](const Tensor& x) { return x * x; }), "");
  EXPECT_EQ(check([](const Tensor& x) { return square_with_derivative(x, x * x); }), "");
}

TEST(Gradcheck, RejectsAWrongDerivative) {
  // 3x instead of 2x (the derivative of 1.5 x^2).
  std::string err = check([](const Tensor& x) { return square_with_derivative(x, x * x * 1.5); });
  EXPECT_NE(err, "");
  EXPECT_NE(err.find("input 0"), std::string::npos) << err;
}

TEST(Gradcheck, RejectsADerivativeOnePercentOff) {
  // Within its default tolerance (rtol 1e-3) a 1% error is a failure, not rounding.
  EXPECT_NE(check([](const Tensor& x) { return square_with_derivative(x, x * x * 1.01); }), "");
}

TEST(Gradcheck, RejectsAMissingGradient) {
  // A derivative that was never written (the value detached): zero where 2x is due.
  EXPECT_NE(check([](const Tensor& x) { return (x * x).detach() + x * 0.0; }), "");
}

TEST(Allclose, AcceptsWhatIsWithinItsBound) {
  Tensor b = from_vector(std::vector<double>{2.0, 0.0, -4.0});
  // |a - b| <= atol + rtol |b| with equality: rtol 0.5 allows 1 at 2, 0 at 0 (atol 0), 2 at -4.
  EXPECT_TRUE(allclose(from_vector(std::vector<double>{3.0, 0.0, -2.0}), b, 0.5, 0.0));
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(allclose(from_vector(std::vector<double>{inf, -inf}), from_vector(std::vector<double>{inf, -inf}), 0, 0));
}

TEST(Allclose, RejectsOneUlpPastTheBound) {
  Tensor b = from_vector(std::vector<double>{2.0});
  double past = std::nextafter(3.0, 4.0);
  EXPECT_FALSE(allclose(from_vector(std::vector<double>{past}), b, 0.5, 0.0));
  // The same at the absolute bound: atol 0.25 about 0.
  Tensor zero = from_vector(std::vector<double>{0.0});
  EXPECT_TRUE(allclose(from_vector(std::vector<double>{0.25}), zero, 0.0, 0.25));
  EXPECT_FALSE(allclose(from_vector(std::vector<double>{std::nextafter(0.25, 1.0)}), zero, 0.0, 0.25));
}

TEST(Allclose, RejectsNaNUnlessAskedToMatchIt) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = from_vector(std::vector<double>{1.0, nan});
  EXPECT_FALSE(allclose(a, from_vector(std::vector<double>{1.0, 1.0}), 1e9, 1e9));  // no bound admits NaN
  EXPECT_FALSE(allclose(a, from_vector(std::vector<double>{1.0, nan}), 1e9, 1e9));
  EXPECT_TRUE(allclose(a, from_vector(std::vector<double>{1.0, nan}), 0, 0, /*equal_nan=*/true));
  EXPECT_FALSE(allclose(from_vector(std::vector<double>{1.0, 1.0}), a, 1e9, 1e9, /*equal_nan=*/true));
}

TEST(Allclose, AnInfinityIsCloseOnlyToItself) {
  // rtol |inf| is infinite, so the bound alone would admit anything beside an infinity.
  double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(allclose(from_vector(std::vector<double>{inf}), from_vector(std::vector<double>{-inf}), 1e9, 1e9));
  EXPECT_FALSE(allclose(from_vector(std::vector<double>{5.0}), from_vector(std::vector<double>{inf}), 1e-5, 1e-8));
  EXPECT_FALSE(allclose(from_vector(std::vector<double>{inf}), from_vector(std::vector<double>{5.0}), 1e-5, 1e-8));
}

TEST(Allclose, RejectsAnotherShapeEvenWhereItWouldBroadcast) {
  Tensor a = zeros({3}, f64);
  EXPECT_FALSE(allclose(a, zeros({1, 3}, f64), 1e9, 1e9));
  EXPECT_FALSE(allclose(a, zeros({1}, f64), 1e9, 1e9));
  EXPECT_FALSE(allclose(zeros({2, 3}, f64), zeros({3, 2}, f64), 1e9, 1e9));
}
