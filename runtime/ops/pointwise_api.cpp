// runtime/ops/pointwise_api.cpp -- the public pointwise functions and operators.
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/pointwise.h"

namespace kiln {

#define KILN_UNARY(fn, Name) \
  Tensor fn(const Tensor& x) { return pointwise(OpId::Name, {x}); }
KILN_UNARY(neg, Neg)
KILN_UNARY(abs, Abs)
KILN_UNARY(sign, Sign)
KILN_UNARY(exp, Exp)
KILN_UNARY(log, Log)
KILN_UNARY(log1p, Log1p)
KILN_UNARY(expm1, Expm1)
KILN_UNARY(sqrt, Sqrt)
KILN_UNARY(rsqrt, Rsqrt)
KILN_UNARY(reciprocal, Reciprocal)
KILN_UNARY(sin, Sin)
KILN_UNARY(cos, Cos)
KILN_UNARY(tanh, Tanh)
KILN_UNARY(erf, Erf)
KILN_UNARY(sigmoid, Sigmoid)
KILN_UNARY(relu, Relu)
KILN_UNARY(silu, Silu)
KILN_UNARY(floor, Floor)
KILN_UNARY(ceil, Ceil)
KILN_UNARY(round, Round)
KILN_UNARY(logical_not, LogicalNot)
#undef KILN_UNARY

Tensor gelu(const Tensor& x, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh",
             "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  return pointwise(approximate == "tanh" ? OpId::GeluTanh : OpId::Gelu, {x});
}

#define KILN_BINARY(fn, Name)                                                               \
  Tensor fn(const Tensor& a, const Tensor& b) { return pointwise(OpId::Name, {a, b}); }     \
  Tensor fn(const Tensor& a, Scalar b) { return pointwise(OpId::Name, {a, b}); }            \
  Tensor fn(Scalar a, const Tensor& b) { return pointwise(OpId::Name, {a, b}); }
KILN_BINARY(add, Add)
KILN_BINARY(sub, Sub)
KILN_BINARY(mul, Mul)
KILN_BINARY(div, Div)
KILN_BINARY(eq, Eq)
KILN_BINARY(ne, Ne)
KILN_BINARY(lt, Lt)
KILN_BINARY(le, Le)
KILN_BINARY(gt, Gt)
KILN_BINARY(ge, Ge)
KILN_BINARY(logical_and, LogicalAnd)
KILN_BINARY(logical_or, LogicalOr)
#undef KILN_BINARY
Tensor pow(const Tensor& a, const Tensor& b) { return pointwise(OpId::Pow, {a, b}); }
Tensor pow(const Tensor& a, Scalar b) { return pointwise(OpId::Pow, {a, b}); }
Tensor pow(Scalar a, const Tensor& b) { return pointwise(OpId::Pow, {a, b}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return pointwise(OpId::Maximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return pointwise(OpId::Minimum, {a, b}); }
Tensor maximum(const Tensor& a, Scalar b) { return pointwise(OpId::Maximum, {a, b}); }
Tensor minimum(const Tensor& a, Scalar b) { return pointwise(OpId::Minimum, {a, b}); }
Tensor relu_grad(const Tensor& y, const Tensor& grad) { return pointwise(OpId::ReluGrad, {y, grad}); }

#define KILN_OPERATOR(op, fn)                                               \
  Tensor operator op(const Tensor& a, const Tensor& b) { return fn(a, b); } \
  Tensor operator op(const Tensor& a, Scalar b) { return fn(a, b); }        \
  Tensor operator op(Scalar a, const Tensor& b) { return fn(a, b); }
KILN_OPERATOR(+, add)
KILN_OPERATOR(-, sub)
KILN_OPERATOR(*, mul)
KILN_OPERATOR(/, div)
KILN_OPERATOR(==, eq)
KILN_OPERATOR(!=, ne)
KILN_OPERATOR(<, lt)
KILN_OPERATOR(<=, le)
KILN_OPERATOR(>, gt)
KILN_OPERATOR(>=, ge)
#undef KILN_OPERATOR
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return pointwise(OpId::Where, {c, a, b}); }
Tensor where(const Tensor& c, const Tensor& a, Scalar b) { return pointwise(OpId::Where, {c, a, b}); }
Tensor where(const Tensor& c, Scalar a, const Tensor& b) { return pointwise(OpId::Where, {c, a, b}); }
Tensor where(const Tensor& c, Scalar a, Scalar b) { return pointwise(OpId::Where, {c, a, b}); }

std::pair<Scalar, Scalar> clamp_bounds(const Tensor& x, std::optional<Scalar> lo,
                                       std::optional<Scalar> hi) {
  KILN_CHECK(lo || hi, "clamp: at least one of lo and hi must be given");
  KILN_CHECK(x.defined(), "clamp: operand 0 is an undefined tensor");
  // A missing bound becomes the widest value of the dtype the op computes in.
  DType ct = pointwise_dtype(OpId::Clamp, {x, lo.value_or(*hi), hi.value_or(*lo)});
  auto widest = [&](bool upper) -> Scalar {
    return visit_dtype(ct, [&](auto v) -> Scalar {
      using T = decltype(v);
      if constexpr (std::is_integral_v<T>) {
        return upper ? Scalar(static_cast<int64_t>(std::numeric_limits<T>::max()))
                     : Scalar(static_cast<int64_t>(std::numeric_limits<T>::lowest()));
      } else {
        double inf = std::numeric_limits<double>::infinity();
        return Scalar(upper ? inf : -inf);
      }
    });
  };
  return {lo.value_or(widest(false)), hi.value_or(widest(true))};
}

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  auto [l, h] = clamp_bounds(x, lo, hi);
  return pointwise(OpId::Clamp, {x, l, h});
}
Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  return pointwise(OpId::Clamp, {x, lo, hi});
}

Tensor cast(const Tensor& x, DType dtype) {
  Attrs a;
  a.dtype = dtype;
  return apply(OpId::Cast, {x}, a);
}

}  // namespace kiln
