// tests/ops/op_specs_pointwise.h -- the Specs of the pointwise ops: each a scalar reference in
// double and the domain its operands are drawn from.
#pragma once

#include <algorithm>
#include <cmath>

#include "tests/ops/op_specs_common.h"

namespace kiln::test {

// ---- pointwise ops: a scalar reference on the domain the operands are drawn from ----------
struct Domain {
  double lo, hi;
  bool whole = false;      // whole numbers only: comparisons meet ties, relu_grad's y meets 0
  bool condition = false;  // a bool operand whatever the dtype under test (where's condition)
};

#define KILN_UNARY_SPEC(Name, lo_, hi_, ...)            \
  template <> struct Spec<OpId::Name> {                 \
    static constexpr Domain domain[1] = {{lo_, hi_}};   \
    static double ref(double x) { return __VA_ARGS__; } \
  };
#define KILN_BINARY_SPEC(Name, lo_, hi_, lo_b, hi_b, whole_, ...)                   \
  template <> struct Spec<OpId::Name> {                                             \
    static constexpr Domain domain[2] = {{lo_, hi_, whole_}, {lo_b, hi_b, whole_}}; \
    static double ref(double a, double b) { return __VA_ARGS__; }                   \
  };

KILN_UNARY_SPEC(Neg, -10, 10, -x)
KILN_UNARY_SPEC(Abs, -10, 10, std::fabs(x))
KILN_UNARY_SPEC(Sign, -10, 10, x > 0 ? 1.0 : x < 0 ? -1.0 : x)  // NaN and +-0 stay
KILN_UNARY_SPEC(Exp, -10, 10, std::exp(x))
KILN_UNARY_SPEC(Log, 0.01, 100, std::log(x))
KILN_UNARY_SPEC(Log1p, -0.99, 10, std::log1p(x))
KILN_UNARY_SPEC(Expm1, -5, 5, std::expm1(x))
KILN_UNARY_SPEC(Sqrt, 0, 100, std::sqrt(x))
KILN_UNARY_SPEC(Rsqrt, 0.01, 100, 1 / std::sqrt(x))
KILN_UNARY_SPEC(Reciprocal, -10, 10, 1 / x)
KILN_UNARY_SPEC(Sin, -10, 10, std::sin(x))
KILN_UNARY_SPEC(Cos, -10, 10, std::cos(x))
KILN_UNARY_SPEC(Tanh, -5, 5, std::tanh(x))
KILN_UNARY_SPEC(Erf, -3, 3, std::erf(x))
KILN_UNARY_SPEC(Sigmoid, -10, 10, 1 / (1 + std::exp(-x)))
KILN_UNARY_SPEC(Relu, -10, 10, std::isnan(x) ? x : std::max(x, 0.0))
KILN_UNARY_SPEC(Gelu, -6, 6, 0.5 * x * (1 + std::erf(x / kSqrt2)))
KILN_UNARY_SPEC(GeluTanh, -6, 6, 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x))))
KILN_UNARY_SPEC(Silu, -10, 10, x / (1 + std::exp(-x)))
KILN_UNARY_SPEC(Floor, -10, 10, std::floor(x))
KILN_UNARY_SPEC(Ceil, -10, 10, std::ceil(x))
KILN_UNARY_SPEC(Round, -10, 10, std::nearbyint(x))  // default rounding: half to even
KILN_UNARY_SPEC(LogicalNot, -2, 2, x == 0 ? 1.0 : 0.0)

KILN_BINARY_SPEC(Add, -10, 10, -10, 10, false, a + b)
KILN_BINARY_SPEC(Sub, -10, 10, -10, 10, false, a - b)
KILN_BINARY_SPEC(Mul, -10, 10, -10, 10, false, a* b)
KILN_BINARY_SPEC(Div, -10, 10, -10, 10, false, a / b)
KILN_BINARY_SPEC(Pow, 0.1, 4, -3, 3, false, std::pow(a, b))
KILN_BINARY_SPEC(Maximum, -10, 10, -10, 10, false, std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b))
KILN_BINARY_SPEC(Minimum, -10, 10, -10, 10, false, std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b))
KILN_BINARY_SPEC(Eq, -3, 3, -3, 3, true, double(a == b))
KILN_BINARY_SPEC(Ne, -3, 3, -3, 3, true, double(a != b))
KILN_BINARY_SPEC(Lt, -3, 3, -3, 3, true, double(a < b))
KILN_BINARY_SPEC(Le, -3, 3, -3, 3, true, double(a <= b))
KILN_BINARY_SPEC(Gt, -3, 3, -3, 3, true, double(a > b))
KILN_BINARY_SPEC(Ge, -3, 3, -3, 3, true, double(a >= b))
KILN_BINARY_SPEC(LogicalAnd, -2, 2, -2, 2, true, double(a != 0 && b != 0))
KILN_BINARY_SPEC(LogicalOr, -2, 2, -2, 2, true, double(a != 0 || b != 0))
#undef KILN_UNARY_SPEC
#undef KILN_BINARY_SPEC

// relu_grad(y, g): y whole, so that it meets 0.
template <> struct Spec<OpId::ReluGrad> {
  static constexpr Domain domain[2] = {{-3, 3, true}, {-10, 10}};
  static double ref(double y, double g) { return y > 0 ? g : 0.0; }
};
template <> struct Spec<OpId::Where> {
  static constexpr Domain domain[3] = {{0, 1, true, true}, {-10, 10}, {-10, 10}};
  static double ref(double c, double a, double b) { return c != 0 ? a : b; }
};
// min(max(x, lo), hi): hi wins when lo > hi; NaN in x stays NaN.
template <> struct Spec<OpId::Clamp> {
  static constexpr Domain domain[3] = {{-10, 10}, {-6, 2}, {-2, 6}};
  static double ref(double x, double lo, double hi) {
    if (std::isnan(x)) return x;
    double t = x < lo ? lo : x;
    return t > hi ? hi : t;
  }
};

}  // namespace kiln::test
