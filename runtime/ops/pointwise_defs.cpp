// runtime/ops/pointwise_defs.cpp -- each pointwise op's OpDef: its formula (formulas.h) plus
// its derivative, written with Tensor ops so the same rule runs eagerly and under a tracer.
// Operand k of a rule is a.operand(k); a gradient per operand comes back (immediates' are
// dropped); the engine sums each back to its input's shape.
#include <cmath>

#include "runtime/api.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/pointwise.h"

namespace kiln {
namespace {

// Piecewise-constant ops (floor, sign, ...) pass no gradient: zeros, as in PyTorch.
Grads zero_vjp(const VjpArgs& a) { return Grads{zeros_like(a.grad)}; }

constexpr double kTwoOverSqrtPi = 1.12837916709551257390;   // 2 / sqrt(pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;      // 1 / sqrt(2 pi)
constexpr double kSqrt1_2 = 0.70710678118654752440;         // 1 / sqrt(2)
constexpr double kGeluK = 0.79788456080286535588;           // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

}  // namespace

// neg(x) = -x
const OpDef defs::Neg = pointwise_def<fm::Neg>([](const VjpArgs& a) { return Grads{-a.grad}; }, kSaveNothing);
// abs(x) = |x|; the gradient at 0 is 0
const OpDef defs::Abs = pointwise_def<fm::Abs>([](const VjpArgs& a) { return Grads{a.grad * sign(a.in[0])}; });
// sign(x) in {-1, 0, 1}
const OpDef defs::Sign = pointwise_def<fm::Sign>(zero_vjp, kSaveNothing);
// exp(x)
const OpDef defs::Exp = pointwise_def<fm::Exp>([](const VjpArgs& a) { return Grads{a.grad * a.out}; }, kSaveOutput);
// log(x), natural
const OpDef defs::Log = pointwise_def<fm::Log>([](const VjpArgs& a) { return Grads{a.grad / a.in[0]}; });
// log1p(x) = log(1 + x)
const OpDef defs::Log1p = pointwise_def<fm::Log1p>([](const VjpArgs& a) { return Grads{a.grad / (a.in[0] + 1.0)}; });
// expm1(x) = exp(x) - 1
const OpDef defs::Expm1 = pointwise_def<fm::Expm1>([](const VjpArgs& a) { return Grads{a.grad * (a.out + 1.0)}; }, kSaveOutput);
// sqrt(x)
const OpDef defs::Sqrt = pointwise_def<fm::Sqrt>([](const VjpArgs& a) { return Grads{a.grad / (a.out * 2.0)}; }, kSaveOutput);
// rsqrt(x) = x^-1/2; d/dx = -1/2 x^-3/2 = -out^3 / 2
const OpDef defs::Rsqrt = pointwise_def<fm::Rsqrt>([](const VjpArgs& a) {
  return Grads{a.grad * a.out * a.out * a.out * -0.5};
}, kSaveOutput);
// reciprocal(x) = 1 / x
const OpDef defs::Reciprocal = pointwise_def<fm::Reciprocal>([](const VjpArgs& a) {
  return Grads{-a.grad * a.out * a.out};
}, kSaveOutput);
// sin(x), cos(x)
const OpDef defs::Sin = pointwise_def<fm::Sin>([](const VjpArgs& a) { return Grads{a.grad * cos(a.in[0])}; });
const OpDef defs::Cos = pointwise_def<fm::Cos>([](const VjpArgs& a) { return Grads{-a.grad * sin(a.in[0])}; });
// tanh(x); d/dx = 1 - tanh^2
const OpDef defs::Tanh = pointwise_def<fm::Tanh>([](const VjpArgs& a) { return Grads{a.grad * (1.0 - a.out * a.out)}; }, kSaveOutput);
// erf(x); d/dx = 2/sqrt(pi) exp(-x^2)
const OpDef defs::Erf = pointwise_def<fm::Erf>([](const VjpArgs& a) {
  return Grads{a.grad * exp(-(a.in[0] * a.in[0])) * kTwoOverSqrtPi};
});
// sigmoid(x) = 1 / (1 + exp(-x)); d/dx = s (1 - s)
const OpDef defs::Sigmoid = pointwise_def<fm::Sigmoid>([](const VjpArgs& a) {
  return Grads{a.grad * a.out * (1.0 - a.out)};
}, kSaveOutput);
// relu(x) = max(x, 0); the gradient at 0 is 0
const OpDef defs::Relu = pointwise_def<fm::Relu>([](const VjpArgs& a) { return Grads{relu_grad(a.out, a.grad)}; }, kSaveOutput);
// relu_grad(y, g): one pass instead of y > 0 then where. Linear in g (d/dg = relu_grad(y, G));
// piecewise constant in y, whose derivative is 0.
const OpDef defs::ReluGrad = pointwise_def<fm::ReluGrad>([](const VjpArgs& a) {
  return Grads{a.needs_grad(0) ? zeros_like(a.operand(0)) : Tensor(), relu_grad(a.operand(0), a.grad)};
});
// gelu(x) = x Phi(x); d/dx = Phi(x) + x phi(x)
const OpDef defs::Gelu = pointwise_def<fm::Gelu>([](const VjpArgs& a) {
  const Tensor& x = a.in[0];
  Tensor cdf = (erf(x * kSqrt1_2) + 1.0) * 0.5;
  Tensor pdf = exp(x * x * -0.5) * kInvSqrt2Pi;
  return Grads{a.grad * (cdf + x * pdf)};
});
// gelu_tanh(x) = x/2 (1 + tanh(u)), u = k (x + c x^3)
const OpDef defs::GeluTanh = pointwise_def<fm::GeluTanh>([](const VjpArgs& a) {
  const Tensor& x = a.in[0];
  Tensor x2 = x * x;
  Tensor t = tanh((x + x2 * x * kGeluC) * kGeluK);
  Tensor du = (x2 * (3.0 * kGeluC) + 1.0) * kGeluK;
  Tensor left = (t + 1.0) * 0.5;
  Tensor sech2 = 1.0 - t * t;
  Tensor right = x * 0.5 * sech2 * du;
  return Grads{a.grad * (left + right)};
});
// silu(x) = x sigmoid(x); d/dx = s (1 + x (1 - s))
const OpDef defs::Silu = pointwise_def<fm::Silu>([](const VjpArgs& a) {
  const Tensor& x = a.in[0];
  Tensor s = sigmoid(x);
  return Grads{a.grad * s * (x * (1.0 - s) + 1.0)};
});
// floor, ceil, round: piecewise constant
const OpDef defs::Floor = pointwise_def<fm::Floor>(zero_vjp, kSaveNothing);
const OpDef defs::Ceil = pointwise_def<fm::Ceil>(zero_vjp, kSaveNothing);
const OpDef defs::Round = pointwise_def<fm::Round>(zero_vjp, kSaveNothing);
// Boolean results: no gradient.
const OpDef defs::LogicalNot = pointwise_def<fm::LogicalNot>(nullptr);
const OpDef defs::Eq = pointwise_def<fm::Eq>(nullptr);
const OpDef defs::Ne = pointwise_def<fm::Ne>(nullptr);
const OpDef defs::Lt = pointwise_def<fm::Lt>(nullptr);
const OpDef defs::Le = pointwise_def<fm::Le>(nullptr);
const OpDef defs::Gt = pointwise_def<fm::Gt>(nullptr);
const OpDef defs::Ge = pointwise_def<fm::Ge>(nullptr);
const OpDef defs::LogicalAnd = pointwise_def<fm::LogicalAnd>(nullptr);
const OpDef defs::LogicalOr = pointwise_def<fm::LogicalOr>(nullptr);

// a + b, a - b
const OpDef defs::Add = pointwise_def<fm::Add>([](const VjpArgs& a) { return Grads{a.grad, a.grad}; }, kSaveNothing);
const OpDef defs::Sub = pointwise_def<fm::Sub>([](const VjpArgs& a) { return Grads{a.grad, -a.grad}; }, kSaveNothing);
// a * b
const OpDef defs::Mul = pointwise_def<fm::Mul>([](const VjpArgs& a) {
  return Grads{a.needs_grad(0) ? a.grad * a.operand(1) : Tensor(),
               a.needs_grad(1) ? a.grad * a.operand(0) : Tensor()};
}, kSaveInputs, 0b11);
// a / b; d/db = -a / b^2
// (Each op in a statement of its own, here and below: C++ leaves the order in which a call's
// operands are computed open, and the traced backward graph must not depend on the compiler.)
const OpDef defs::Div = pointwise_def<fm::Div>([](const VjpArgs& a) {
  Tensor b = a.operand(1);
  Tensor ga, gb;
  if (a.needs_grad(0)) ga = a.grad / b;
  if (a.needs_grad(1)) {
    Tensor num = -a.grad * a.operand(0);
    Tensor den = b * b;
    gb = num / den;
  }
  return Grads{ga, gb};
}, kSaveInputs, 0b01);
// pow(a, b); d/da = b a^(b-1) (0 where b = 0), d/db = a^b log(a) (0 where a = 0 and b >= 0)
const OpDef defs::Pow = pointwise_def<fm::Pow>([](const VjpArgs& a) {
  Tensor x = a.operand(0), e = a.operand(1);
  Tensor gx, ge;
  if (a.needs_grad(0)) gx = where(e == 0, 0.0, a.grad * e * pow(x, e - 1.0));
  if (a.needs_grad(1)) ge = where(logical_and(x == 0, e >= 0), 0.0, a.grad * a.out * log(x));
  return Grads{gx, ge};
}, kSaveBoth);
// maximum(a, b), minimum(a, b): the larger (smaller) side gets the gradient; ties split it
const OpDef defs::Maximum = pointwise_def<fm::Maximum>([](const VjpArgs& a) {
  Tensor x = a.operand(0), y = a.operand(1), half = a.grad * 0.5;
  return Grads{where(x > y, a.grad, where(x == y, half, 0.0)), where(y > x, a.grad, where(x == y, half, 0.0))};
});
const OpDef defs::Minimum = pointwise_def<fm::Minimum>([](const VjpArgs& a) {
  Tensor x = a.operand(0), y = a.operand(1), half = a.grad * 0.5;
  return Grads{where(x < y, a.grad, where(x == y, half, 0.0)), where(y < x, a.grad, where(x == y, half, 0.0))};
});
// where(c, a, b)
const OpDef defs::Where = pointwise_def<fm::Where>([](const VjpArgs& a) {
  Tensor c = a.operand(0);
  return Grads{Tensor(), a.needs_grad(1) ? where(c, a.grad, 0.0) : Tensor(),
               a.needs_grad(2) ? where(c, 0.0, a.grad) : Tensor()};
});
// clamp(x, lo, hi) = min(max(x, lo), hi): the gradient goes to whichever of x, lo, hi the
// result is (with lo > hi that is hi)
const OpDef defs::Clamp = pointwise_def<fm::Clamp>([](const VjpArgs& a) {
  Tensor x = a.operand(0), lo = a.operand(1), hi = a.operand(2);
  Tensor t = maximum(x, lo), inside = t <= hi;
  return Grads{a.needs_grad(0) ? where(logical_and(x >= lo, inside), a.grad, 0.0) : Tensor(),
               a.needs_grad(1) ? where(logical_and(x < lo, inside), a.grad, 0.0) : Tensor(),
               a.needs_grad(2) ? where(t > hi, a.grad, 0.0) : Tensor()};
});

}  // namespace kiln
