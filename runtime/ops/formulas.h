// runtime/ops/formulas.h -- the scalar formula of every pointwise op, written once.
//
// Each formula is a template over a "scalar algebra" type T: plain numbers in the reference
// tests, SIMD vectors in the eager kernels (runtime/cpu/kernels_isa.cpp), and IR emitters in
// codegen. A T provides: construction from a double constant, + - * / and unary -, the six
// comparisons (giving a mask M), select(M, T, T), M & M, M | M, and the math functions
// exp log log1p expm1 sqrt sin cos tanh erf pow floor ceil rint fabs (floor/ceil/rint/fabs are
// also defined for integer T). `kinds` lists the dtype kinds the op computes in, and `promote`
// how the API picks that dtype (see runtime/op.h).
#pragma once

#include <cstdint>

namespace kiln::fm {

// Must agree with kiln::Promote and kiln::KindMask in runtime/op.h (checked there).
enum class P : uint8_t { Same, Float, Compare, Logical };
inline constexpr uint8_t B = 1, I = 2, F = 4;

struct Neg { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x) { return -x; } };
struct Abs { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x) { return fabs(x); } };
// sign(NaN) is NaN and sign(-0) is -0, as in PyTorch: the last branch returns x * 0.
struct Sign { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x) {
    return select(x > T(0), T(1), select(x < T(0), T(-1), x * T(0)));
  } };
struct Exp { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return exp(x); } };
struct Log { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return log(x); } };
struct Log1p { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return log1p(x); } };
struct Expm1 { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return expm1(x); } };
struct Sqrt { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return sqrt(x); } };
struct Rsqrt { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return T(1) / sqrt(x); } };
struct Reciprocal { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return T(1) / x; } };
struct Sin { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return sin(x); } };
struct Cos { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return cos(x); } };
struct Tanh { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return tanh(x); } };
struct Erf { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return erf(x); } };
struct Sigmoid { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return T(1) / (T(1) + exp(-x)); } };
// relu(NaN) is NaN: the comparison is false for NaN, so x passes through.
struct Relu { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x) { return select(x < T(0), T(0), x); } };
// Exact gelu: x * Phi(x).
struct Gelu { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) {
    return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
  } };
// The tanh approximation of gelu (PyTorch's approximate="tanh").
struct GeluTanh { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) {
    T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + tanh(inner));
  } };
struct Silu { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T x) { return x / (T(1) + exp(-x)); } };
// floor, ceil and round keep integer inputs as they are; round is half-to-even, like PyTorch.
struct Floor { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x) { return floor(x); } };
struct Ceil { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x) { return ceil(x); } };
struct Round { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x) { return rint(x); } };
struct LogicalNot { static constexpr P promote = P::Logical; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T x) { return x == T(0); } };

struct Add { static constexpr P promote = P::Same; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a + b; } };
struct Sub { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T a, T b) { return a - b; } };
struct Mul { static constexpr P promote = P::Same; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a * b; } };
// True division: integers divide as f32 (PyTorch's `/`).
struct Div { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T a, T b) { return a / b; } };
struct Pow { static constexpr P promote = P::Float; static constexpr uint8_t kinds = F;
  template <class T> static auto f(T a, T b) { return pow(a, b); } };
// maximum and minimum propagate NaN from either side, like PyTorch.
struct Maximum { static constexpr P promote = P::Same; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return select(a != a, a, select(a > b, a, b)); } };
struct Minimum { static constexpr P promote = P::Same; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return select(a != a, a, select(a < b, a, b)); } };
// relu_grad(y, g): relu's gradient g where its output y is positive, else 0 (NaN y gives 0).
struct ReluGrad { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T y, T g) { return select(y > T(0), g, T(0)); } };
struct Eq { static constexpr P promote = P::Compare; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a == b; } };
struct Ne { static constexpr P promote = P::Compare; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a != b; } };
struct Lt { static constexpr P promote = P::Compare; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a < b; } };
struct Le { static constexpr P promote = P::Compare; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a <= b; } };
struct Gt { static constexpr P promote = P::Compare; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a > b; } };
struct Ge { static constexpr P promote = P::Compare; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return a >= b; } };
struct LogicalAnd { static constexpr P promote = P::Logical; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return (a != T(0)) & (b != T(0)); } };
struct LogicalOr { static constexpr P promote = P::Logical; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T a, T b) { return (a != T(0)) | (b != T(0)); } };

// where(cond, a, b): cond arrives converted to the compute dtype (0 or 1).
struct Where { static constexpr P promote = P::Same; static constexpr uint8_t kinds = B | I | F;
  template <class T> static auto f(T c, T a, T b) { return select(c != T(0), a, b); } };
// clamp(x, lo, hi) = min(max(x, lo), hi): hi wins when lo > hi; NaN in x stays NaN.
struct Clamp { static constexpr P promote = P::Same; static constexpr uint8_t kinds = I | F;
  template <class T> static auto f(T x, T lo, T hi) {
    T t = select(x < lo, lo, x);
    return select(t > hi, hi, t);
  } };

}  // namespace kiln::fm
