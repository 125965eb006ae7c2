// tests/ops/pointwise_cases.h -- every pointwise op with its double-precision reference and the
// input domain it is tested on; shared by the pointwise test files.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "tests/ops/reference.h"

namespace kiln::test {

struct UnaryCase {
  const char* name;
  OpId id;
  Tensor (*fn)(const Tensor&);
  double (*ref)(double);
  double lo, hi;  // inputs are drawn uniformly from [lo, hi]
};

struct BinaryCase {
  const char* name;
  OpId id;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  double lo, hi;       // first operand's domain
  double lo_b, hi_b;   // second operand's domain
  bool whole = false;  // whole numbers only, so comparisons meet ties
};

// gtest prints a failing case's parameter: its name, not its bytes.
inline void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }
inline void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

inline const double kSqrt2 = std::sqrt(2.0);
inline const double kPi = std::acos(-1.0);

inline const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", OpId::Neg, [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -10,
       10},
      {"abs", OpId::Abs, [](const Tensor& x) { return abs(x); },
       [](double x) { return std::fabs(x); }, -10, 10},
      {"sign", OpId::Sign, [](const Tensor& x) { return sign(x); },
       [](double x) { return x > 0   ? 1.0
                             : x < 0 ? -1.0
                                     : x; }, -10, 10},  // NaN, +-0 stay
      {"exp", OpId::Exp, [](const Tensor& x) { return exp(x); },
       [](double x) { return std::exp(x); }, -10, 10},
      {"log", OpId::Log, [](const Tensor& x) { return log(x); },
       [](double x) { return std::log(x); }, 0.01, 100},
      {"log1p", OpId::Log1p, [](const Tensor& x) { return log1p(x); },
       [](double x) { return std::log1p(x); }, -0.99, 10},
      {"expm1", OpId::Expm1, [](const Tensor& x) { return expm1(x); },
       [](double x) { return std::expm1(x); }, -5, 5},
      {"sqrt", OpId::Sqrt, [](const Tensor& x) { return sqrt(x); },
       [](double x) { return std::sqrt(x); }, 0, 100},
      {"rsqrt", OpId::Rsqrt, [](const Tensor& x) { return rsqrt(x); },
       [](double x) { return 1 / std::sqrt(x); }, 0.01, 100},
      {"reciprocal", OpId::Reciprocal, [](const Tensor& x) { return reciprocal(x); },
       [](double x) { return 1 / x; }, -10, 10},
      {"sin", OpId::Sin, [](const Tensor& x) { return sin(x); },
       [](double x) { return std::sin(x); }, -10, 10},
      {"cos", OpId::Cos, [](const Tensor& x) { return cos(x); },
       [](double x) { return std::cos(x); }, -10, 10},
      {"tanh", OpId::Tanh, [](const Tensor& x) { return tanh(x); },
       [](double x) { return std::tanh(x); }, -5, 5},
      {"erf", OpId::Erf, [](const Tensor& x) { return erf(x); },
       [](double x) { return std::erf(x); }, -3, 3},
      {"sigmoid", OpId::Sigmoid, [](const Tensor& x) { return sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -10, 10},
      {"relu", OpId::Relu, [](const Tensor& x) { return relu(x); },
       [](double x) { return std::isnan(x) ? x : std::max(x, 0.0); }, -10, 10},
      {"gelu", OpId::Gelu, [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / kSqrt2)); }, -6, 6},
      {"gelu_tanh", OpId::GeluTanh, [](const Tensor& x) { return gelu(x, "tanh"); },
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
       },
       -6, 6},
      {"silu", OpId::Silu, [](const Tensor& x) { return silu(x); },
       [](double x) { return x / (1 + std::exp(-x)); }, -10, 10},
      {"floor", OpId::Floor, [](const Tensor& x) { return floor(x); },
       [](double x) { return std::floor(x); }, -10, 10},
      {"ceil", OpId::Ceil, [](const Tensor& x) { return ceil(x); },
       [](double x) { return std::ceil(x); }, -10, 10},
      {"round", OpId::Round, [](const Tensor& x) { return round(x); },
       [](double x) { return std::nearbyint(x); }, -10, 10},  // default rounding: half to even
      {"logical_not", OpId::LogicalNot, [](const Tensor& x) { return logical_not(x); },
       [](double x) { return x == 0 ? 1.0 : 0.0; }, -2, 2},
  };
  return cases;
}

inline const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", OpId::Add, [](const Tensor& a, const Tensor& b) { return add(a, b); },
       [](double a, double b) { return a + b; }, -10, 10, -10, 10},
      {"sub", OpId::Sub, [](const Tensor& a, const Tensor& b) { return sub(a, b); },
       [](double a, double b) { return a - b; }, -10, 10, -10, 10},
      {"mul", OpId::Mul, [](const Tensor& a, const Tensor& b) { return mul(a, b); },
       [](double a, double b) { return a * b; }, -10, 10, -10, 10},
      {"div", OpId::Div, [](const Tensor& a, const Tensor& b) { return div(a, b); },
       [](double a, double b) { return a / b; }, -10, 10, -10, 10},
      {"pow", OpId::Pow, [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.1, 4, -3, 3},
      {"maximum", OpId::Maximum, [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); },
       -10, 10, -10, 10},
      {"minimum", OpId::Minimum, [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); },
       -10, 10, -10, 10},
      {"eq", OpId::Eq, [](const Tensor& a, const Tensor& b) { return eq(a, b); },
       [](double a, double b) { return double(a == b); }, -3, 3, -3, 3, true},
      {"ne", OpId::Ne, [](const Tensor& a, const Tensor& b) { return ne(a, b); },
       [](double a, double b) { return double(a != b); }, -3, 3, -3, 3, true},
      {"lt", OpId::Lt, [](const Tensor& a, const Tensor& b) { return lt(a, b); },
       [](double a, double b) { return double(a < b); }, -3, 3, -3, 3, true},
      {"le", OpId::Le, [](const Tensor& a, const Tensor& b) { return le(a, b); },
       [](double a, double b) { return double(a <= b); }, -3, 3, -3, 3, true},
      {"gt", OpId::Gt, [](const Tensor& a, const Tensor& b) { return gt(a, b); },
       [](double a, double b) { return double(a > b); }, -3, 3, -3, 3, true},
      {"ge", OpId::Ge, [](const Tensor& a, const Tensor& b) { return ge(a, b); },
       [](double a, double b) { return double(a >= b); }, -3, 3, -3, 3, true},
      {"logical_and", OpId::LogicalAnd,
       [](const Tensor& a, const Tensor& b) { return logical_and(a, b); },
       [](double a, double b) { return double(a != 0 && b != 0); }, -2, 2, -2, 2, true},
      {"relu_grad", OpId::ReluGrad, [](const Tensor& a, const Tensor& b) { return relu_grad(a, b); },
       [](double a, double b) { return a > 0 ? b : 0.0; }, -3, 3, -10, 10, true},
      {"logical_or", OpId::LogicalOr,
       [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
       [](double a, double b) { return double(a != 0 || b != 0); }, -2, 2, -2, 2, true},
  };
  return cases;
}

/// The dtype op `id` computes in for tensor operands of dtype t (PyTorch's rules: true
/// division and transcendental functions take integers and bool to f32).
inline DType compute_dtype(OpId id, DType t) {
  return op_def(id).promote == Promote::Float ? to_float_dtype(t) : t;
}
/// Whether op `id` accepts tensor operands of dtype t.
inline bool accepts(OpId id, DType t) { return op_def(id).kinds & kind_bit(compute_dtype(id, t)); }
/// The result dtype of op `id` on operands of dtype t.
inline DType result_dtype(OpId id, DType t) {
  Promote p = op_def(id).promote;
  return p == Promote::Compare || p == Promote::Logical ? DType::Bool : compute_dtype(id, t);
}

/// Inputs of dtype t in [lo, hi] (unsigned and bool inputs clip lo at 0).
inline Tensor operand(const Dims& shape, DType t, double lo, double hi, bool whole = false) {
  if (t == DType::U8) lo = std::max(lo, 0.0);
  return uniform(shape, t, lo, hi, whole);
}

/// The reference of a unary case on x, stored in the result dtype.
inline std::vector<double> unary_ref(const UnaryCase& c, const std::vector<double>& x, DType out) {
  return map(x, [&](double v) { return stored_as(out, c.ref(v)); });
}
inline std::vector<double> binary_ref(const BinaryCase& c, const std::vector<double>& a,
                                      const std::vector<double>& b, DType out) {
  return map(a, b, [&](double u, double v) { return stored_as(out, c.ref(u, v)); });
}

}  // namespace kiln::test
