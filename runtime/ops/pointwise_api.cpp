// runtime/ops/pointwise_api.cpp -- the public pointwise functions: one per pointwise op,
// generated from ops.def (declared the same way in runtime/api.h), then the operators and the
// few overloads with a shape of their own (gelu's approximate, where's and clamp's numbers).
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/pointwise.h"

namespace kiln {

#define KILN_POINTWISE_FN_1(Name, name) \
  Tensor name(const Tensor& x) { return pointwise(OpId::Name, {x}); }
#define KILN_POINTWISE_FN_2(Name, name)                                                   \
  Tensor name(const Tensor& a, const Tensor& b) { return pointwise(OpId::Name, {a, b}); } \
  Tensor name(const Tensor& a, Scalar b) { return pointwise(OpId::Name, {a, b}); }        \
  Tensor name(Scalar a, const Tensor& b) { return pointwise(OpId::Name, {a, b}); }
#define KILN_POINTWISE_FN_3(Name, name) \
  Tensor name(const Tensor& a, const Tensor& b, const Tensor& c) { return pointwise(OpId::Name, {a, b, c}); }
#define KILN_POINTWISE_FN(Name, name, arity) KILN_POINTWISE_FN_##arity(Name, name)
#define OP(Name, name, arity, family) KILN_IF_POINTWISE_##family(KILN_POINTWISE_FN(Name, name, arity))
#include "runtime/ops.def"
#undef OP

Tensor gelu(const Tensor& x, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh",
             "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  return approximate == "tanh" ? gelu_tanh(x) : gelu(x);
}

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

Tensor where(const Tensor& c, const Tensor& a, Scalar b) { return pointwise(OpId::Where, {c, a, b}); }
Tensor where(const Tensor& c, Scalar a, const Tensor& b) { return pointwise(OpId::Where, {c, a, b}); }
Tensor where(const Tensor& c, Scalar a, Scalar b) { return pointwise(OpId::Where, {c, a, b}); }

std::pair<Scalar, Scalar> clamp_bounds(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
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

Tensor cast(const Tensor& x, DType dtype) {
  Attrs a;
  a.dtype = dtype;
  return apply(OpId::Cast, {x}, a);
}

}  // namespace kiln
