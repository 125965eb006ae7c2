// runtime/ops/formulas.h -- every pointwise op, written once: its scalar formula `f`, its
// derivative `df`, and the dtype rules both follow. A new pointwise op is one line in
// runtime/ops.def plus one block here; its OpDef (pointwise_defs.cpp) and its public function
// (runtime/api.h) are generated from the two.
//
// `f` is a template over a "scalar algebra" type T: plain numbers in the reference tests, SIMD
// vectors in the eager kernels (runtime/simd/kernels_isa.cpp), and IR emitters in codegen. A T
// provides: construction from a double constant, + - * / and unary -, the six comparisons
// (giving a mask M), select(M, T, T), M & M, M | M, and the math functions exp log log1p
// expm1 sqrt sin cos tanh erf pow floor ceil rint fabs (floor/ceil/rint/fabs are also defined
// for integer T).
//
// `df(a)` is the vector-Jacobian product, a template over the rule's arguments (kiln::VjpArgs:
// a.grad, a.out, a.in[k], a.operand(k), a.needs_grad(k)) written with Tensor ops, so the same
// rule runs eagerly and, on a tracer's tensors, as IR autodiff. It returns a braced list (so
// its entries are computed in order) of one gradient per operand slot, `none(a)` where there
// is none; the engine sums each back to its input's shape.
// It is a template only so that this header needs no Tensor API: the SIMD kernels, compiled
// once per instruction set, include it and never instantiate `df`.
//
// Op<promote, kinds, saves, linear_in> gives the rules: `kinds` lists the dtype kinds the op
// computes in, `promote` how the API picks that dtype (kiln::Promote), `saves` what `df`
// reads (kiln::SaveMask; NoDerivative: no gradient flows, and there is no `df`), and bit k of
// `linear_in` says the op is linear in operand k, so `df` reads only the other operands.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln::fm {

// Must agree with kiln::Promote, kiln::KindMask and kiln::SaveMask (checked in apply.cpp).
enum class P : uint8_t { Same, Float, Compare, Logical };
inline constexpr uint8_t B = 1, I = 2, F = 4;
enum Saves : uint8_t { Nothing = 0, Inputs = 1, Output = 2, Both = 3, NoDerivative = 4 };

template <P promote_, uint8_t kinds_, Saves saves_ = Inputs, uint8_t linear_in_ = 0> struct Op {
  static constexpr P promote = promote_;
  static constexpr uint8_t kinds = kinds_;
  static constexpr Saves saves = saves_;
  static constexpr uint8_t linear_in = linear_in_;
};

// No gradient for this operand.
template <class A> auto none(const A& a) { return std::decay_t<decltype(a.grad)>(); }
// Piecewise-constant ops (floor, sign, ...) pass no gradient: zeros, as in PyTorch.
struct ZeroDerivative {
  template <class A> static typename A::Grads df(const A& a) { return {zeros_like(a.grad)}; }
};

inline constexpr double kTwoOverSqrtPi = 1.12837916709551257390;  // 2 / sqrt(pi)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;     // 1 / sqrt(2 pi)
inline constexpr double kSqrt1_2 = 0.70710678118654752440;        // 1 / sqrt(2)
inline constexpr double kGeluK = 0.79788456080286535588;          // sqrt(2 / pi)
inline constexpr double kGeluC = 0.044715;

// ---- unary --------------------------------------------------------------------------------
// -x
struct Neg : Op<P::Same, I | F, Nothing> {
  template <class T> static auto f(T x) { return -x; }
  template <class A> static typename A::Grads df(const A& a) { return {-a.grad}; }
};
// |x|; the gradient at 0 is 0
struct Abs : Op<P::Same, I | F> {
  template <class T> static auto f(T x) { return fabs(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad * sign(a.in[0])}; }
};
// sign(x) in {-1, 0, 1}. sign(NaN) is NaN and sign(-0) is -0, as in PyTorch: the last branch
// returns x * 0.
struct Sign : Op<P::Same, I | F, Nothing>, ZeroDerivative {
  template <class T> static auto f(T x) { return select(x > T(0), T(1), select(x < T(0), T(-1), x * T(0))); }
};
struct Exp : Op<P::Float, F, Output> {
  template <class T> static auto f(T x) { return exp(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad * a.out}; }
};
// natural log
struct Log : Op<P::Float, F> {
  template <class T> static auto f(T x) { return log(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad / a.in[0]}; }
};
// log(1 + x)
struct Log1p : Op<P::Float, F> {
  template <class T> static auto f(T x) { return log1p(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad / (a.in[0] + 1.0)}; }
};
// exp(x) - 1
struct Expm1 : Op<P::Float, F, Output> {
  template <class T> static auto f(T x) { return expm1(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad * (a.out + 1.0)}; }
};
struct Sqrt : Op<P::Float, F, Output> {
  template <class T> static auto f(T x) { return sqrt(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad / (a.out * 2.0)}; }
};
// x^-1/2; d/dx = -1/2 x^-3/2 = -out^3 / 2
struct Rsqrt : Op<P::Float, F, Output> {
  template <class T> static auto f(T x) { return T(1) / sqrt(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad * a.out * a.out * a.out * -0.5}; }
};
// 1 / x
struct Reciprocal : Op<P::Float, F, Output> {
  template <class T> static auto f(T x) { return T(1) / x; }
  template <class A> static typename A::Grads df(const A& a) { return {-a.grad * a.out * a.out}; }
};
struct Sin : Op<P::Float, F> {
  template <class T> static auto f(T x) { return sin(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad * cos(a.in[0])}; }
};
struct Cos : Op<P::Float, F> {
  template <class T> static auto f(T x) { return cos(x); }
  template <class A> static typename A::Grads df(const A& a) { return {-a.grad * sin(a.in[0])}; }
};
// d/dx tanh = 1 - tanh^2
struct Tanh : Op<P::Float, F, Output> {
  template <class T> static auto f(T x) { return tanh(x); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad * (1.0 - a.out * a.out)}; }
};
// d/dx erf = 2/sqrt(pi) exp(-x^2)
struct Erf : Op<P::Float, F> {
  template <class T> static auto f(T x) { return erf(x); }
  template <class A> static typename A::Grads df(const A& a) {
    return {a.grad * exp(-(a.in[0] * a.in[0])) * kTwoOverSqrtPi};
  }
};
// 1 / (1 + exp(-x)); d/dx = s (1 - s)
struct Sigmoid : Op<P::Float, F, Output> {
  template <class T> static auto f(T x) { return T(1) / (T(1) + exp(-x)); }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad * a.out * (1.0 - a.out)}; }
};
// max(x, 0); relu(NaN) is NaN (the comparison is false for NaN, so x passes through); the
// gradient at 0 is 0
struct Relu : Op<P::Same, I | F, Output> {
  template <class T> static auto f(T x) { return select(x < T(0), T(0), x); }
  template <class A> static typename A::Grads df(const A& a) { return {relu_grad(a.out, a.grad)}; }
};
// Exact gelu: x Phi(x); d/dx = Phi(x) + x phi(x). The public gelu(x, "tanh") picks GeluTanh.
struct Gelu : Op<P::Float, F> {
  template <class T> static auto f(T x) { return T(0.5) * x * (T(1) + erf(x * T(kSqrt1_2))); }
  template <class A> static typename A::Grads df(const A& a) {
    const auto& x = a.in[0];
    auto cdf = (erf(x * kSqrt1_2) + 1.0) * 0.5;
    auto pdf = exp(x * x * -0.5) * kInvSqrt2Pi;
    return {a.grad * (cdf + x * pdf)};
  }
};
// The tanh approximation of gelu (PyTorch's approximate="tanh"): x/2 (1 + tanh(u)),
// u = k (x + c x^3)
struct GeluTanh : Op<P::Float, F> {
  template <class T> static auto f(T x) {
    T inner = T(kGeluK) * (x + T(kGeluC) * x * x * x);
    return T(0.5) * x * (T(1) + tanh(inner));
  }
  template <class A> static typename A::Grads df(const A& a) {
    const auto& x = a.in[0];
    auto x2 = x * x;
    auto t = tanh((x + x2 * x * kGeluC) * kGeluK);
    auto du = (x2 * (3.0 * kGeluC) + 1.0) * kGeluK;
    auto left = (t + 1.0) * 0.5;
    auto sech2 = 1.0 - t * t;
    auto right = x * 0.5 * sech2 * du;
    return {a.grad * (left + right)};
  }
};
// x sigmoid(x); d/dx = s (1 + x (1 - s))
struct Silu : Op<P::Float, F> {
  template <class T> static auto f(T x) { return x / (T(1) + exp(-x)); }
  template <class A> static typename A::Grads df(const A& a) {
    const auto& x = a.in[0];
    auto s = sigmoid(x);
    return {a.grad * s * (x * (1.0 - s) + 1.0)};
  }
};
// floor, ceil and round keep integer inputs as they are; round is half-to-even, like PyTorch.
struct Floor : Op<P::Same, I | F, Nothing>, ZeroDerivative {
  template <class T> static auto f(T x) { return floor(x); }
};
struct Ceil : Op<P::Same, I | F, Nothing>, ZeroDerivative {
  template <class T> static auto f(T x) { return ceil(x); }
};
struct Round : Op<P::Same, I | F, Nothing>, ZeroDerivative {
  template <class T> static auto f(T x) { return rint(x); }
};
struct LogicalNot : Op<P::Logical, B | I | F, NoDerivative> {
  template <class T> static auto f(T x) { return x == T(0); }
};

// ---- binary -------------------------------------------------------------------------------
struct Add : Op<P::Same, B | I | F, Nothing> {
  template <class T> static auto f(T a, T b) { return a + b; }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad, a.grad}; }
};
struct Sub : Op<P::Same, I | F, Nothing> {
  template <class T> static auto f(T a, T b) { return a - b; }
  template <class A> static typename A::Grads df(const A& a) { return {a.grad, -a.grad}; }
};
struct Mul : Op<P::Same, B | I | F, Inputs, 0b11> {
  template <class T> static auto f(T a, T b) { return a * b; }
  template <class A> static typename A::Grads df(const A& a) {
    return {a.needs_grad(0) ? a.grad * a.operand(1) : none(a), a.needs_grad(1) ? a.grad * a.operand(0) : none(a)};
  }
};
// True division: integers divide as f32 (PyTorch's `/`). d/db = -a / b^2.
// (Each op in a statement of its own, here and below: C++ leaves the order in which a call's
// operands are computed open, and the traced backward graph must not depend on the compiler.)
struct Div : Op<P::Float, F, Inputs, 0b01> {
  template <class T> static auto f(T a, T b) { return a / b; }
  template <class A> static typename A::Grads df(const A& a) {
    auto b = a.operand(1);
    auto ga = none(a), gb = none(a);
    if (a.needs_grad(0)) ga = a.grad / b;
    if (a.needs_grad(1)) {
      auto num = -a.grad * a.operand(0);
      auto den = b * b;
      gb = num / den;
    }
    return {ga, gb};
  }
};
// pow(a, b); d/da = b a^(b-1) (0 where b = 0), d/db = a^b log(a) (0 where a = 0 and b >= 0)
struct Pow : Op<P::Float, F, Both> {
  template <class T> static auto f(T a, T b) { return pow(a, b); }
  template <class A> static typename A::Grads df(const A& a) {
    auto x = a.operand(0), e = a.operand(1);
    auto gx = none(a), ge = none(a);
    if (a.needs_grad(0)) gx = where(e == 0, 0.0, a.grad * e * pow(x, e - 1.0));
    if (a.needs_grad(1)) ge = where(logical_and(x == 0, e >= 0), 0.0, a.grad * a.out * log(x));
    return {gx, ge};
  }
};
// maximum and minimum propagate NaN from either side, like PyTorch. The larger (smaller) side
// gets the gradient; ties split it.
struct Maximum : Op<P::Same, B | I | F> {
  template <class T> static auto f(T a, T b) { return select(a != a, a, select(a > b, a, b)); }
  template <class A> static typename A::Grads df(const A& a) {
    auto x = a.operand(0), y = a.operand(1), half = a.grad * 0.5;
    return {where(x > y, a.grad, where(x == y, half, 0.0)), where(y > x, a.grad, where(x == y, half, 0.0))};
  }
};
struct Minimum : Op<P::Same, B | I | F> {
  template <class T> static auto f(T a, T b) { return select(a != a, a, select(a < b, a, b)); }
  template <class A> static typename A::Grads df(const A& a) {
    auto x = a.operand(0), y = a.operand(1), half = a.grad * 0.5;
    return {where(x < y, a.grad, where(x == y, half, 0.0)), where(y < x, a.grad, where(x == y, half, 0.0))};
  }
};
// relu_grad(y, g): relu's gradient g where its output y is positive, else 0 (NaN y gives 0);
// PyTorch's threshold_backward, one pass instead of y > 0 then where. Linear in g (d/dg =
// relu_grad(y, G)); piecewise constant in y, whose derivative is 0.
struct ReluGrad : Op<P::Same, I | F> {
  template <class T> static auto f(T y, T g) { return select(y > T(0), g, T(0)); }
  template <class A> static typename A::Grads df(const A& a) {
    return {a.needs_grad(0) ? zeros_like(a.operand(0)) : none(a), relu_grad(a.operand(0), a.grad)};
  }
};
// Comparisons and logical ops give bool: no gradient.
struct Eq : Op<P::Compare, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return a == b; }
};
struct Ne : Op<P::Compare, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return a != b; }
};
struct Lt : Op<P::Compare, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return a < b; }
};
struct Le : Op<P::Compare, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return a <= b; }
};
struct Gt : Op<P::Compare, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return a > b; }
};
struct Ge : Op<P::Compare, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return a >= b; }
};
struct LogicalAnd : Op<P::Logical, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return (a != T(0)) & (b != T(0)); }
};
struct LogicalOr : Op<P::Logical, B | I | F, NoDerivative> {
  template <class T> static auto f(T a, T b) { return (a != T(0)) | (b != T(0)); }
};

// ---- ternary ------------------------------------------------------------------------------
// where(cond, a, b): cond arrives converted to the compute dtype (0 or 1).
struct Where : Op<P::Same, B | I | F> {
  template <class T> static auto f(T c, T a, T b) { return select(c != T(0), a, b); }
  template <class A> static typename A::Grads df(const A& a) {
    auto c = a.operand(0);
    return {none(a), a.needs_grad(1) ? where(c, a.grad, 0.0) : none(a),
            a.needs_grad(2) ? where(c, 0.0, a.grad) : none(a)};
  }
};
// clamp(x, lo, hi) = min(max(x, lo), hi): hi wins when lo > hi; NaN in x stays NaN. The
// gradient goes to whichever of x, lo, hi the result is.
struct Clamp : Op<P::Same, I | F> {
  template <class T> static auto f(T x, T lo, T hi) {
    T t = select(x < lo, lo, x);
    return select(t > hi, hi, t);
  }
  template <class A> static typename A::Grads df(const A& a) {
    auto x = a.operand(0), lo = a.operand(1), hi = a.operand(2);
    auto t = maximum(x, lo), inside = t <= hi;
    return {a.needs_grad(0) ? where(logical_and(x >= lo, inside), a.grad, 0.0) : none(a),
            a.needs_grad(1) ? where(logical_and(x < lo, inside), a.grad, 0.0) : none(a),
            a.needs_grad(2) ? where(t > hi, a.grad, 0.0) : none(a)};
  }
};

}  // namespace kiln::fm
