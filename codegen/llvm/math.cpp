// codegen/llvm/math.cpp -- the math functions of the LLVM emitter's scalar algebra (exp log
// log1p expm1 sqrt sin cos tanh erf pow floor ceil rint fabs): SLEEF scalar calls, LLVM
// intrinsics, and f32 exp, tanh and erf inline (polynomial approximations, error bounds below).
//
// Each scalar SLEEF call carries the vector variants the host can run
// ("vector-function-abi-variant"), so the loop vectorizer widens transcendentals too.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iterator>
#include <string>
#include <vector>

#include "codegen/llvm/scalar.h"
#include "runtime/check.h"

namespace kiln::codegen::llvm_ir {

// A call to a SLEEF scalar function with the host's vector variants attached.
Val Emitter::math(const MathFn& f, const Val& x, const Val* y) {
  Ty t = x.number && y ? y->ty : x.ty;
  KILN_CHECK(is_fp(t), "codegen: {} needs a float operand", f.name);
  bool d = t == Ty::F64;
  f64_math = f64_math || d;
  std::string suffix = target.fma ? "purecfma" : "purec";
  std::string scalar = fmt::format("Sleef_{}{}1_u10{}", f.name, d ? "d" : "f", suffix);
  std::string params = f.two_args ? fmt::format("{0}, {0}", ll(t)) : ll(t);
  decls.insert(fmt::format("declare {} @{}({}) #0", ll(t), scalar, params));
  std::vector<std::string> variants;
  std::string vparams = f.two_args ? "vv" : "v";
  auto add_variant = [&](int lanes, const char* isa) {
    std::string vec = fmt::format("Sleef_{}{}{}_u10{}", f.name, d ? "d" : "f", lanes, isa);
    std::string vt = fmt::format("<{} x {}>", lanes, ll(t));
    decls.insert(fmt::format("declare {} @{}({}) #0", vt, vec, f.two_args ? vt + ", " + vt : vt));
    vector_fns.insert(vec);
    variants.push_back(fmt::format("_ZGV_LLVM_N{}{}_{}({})", lanes, vparams, scalar, vec));
  };
  if (target.avx2) add_variant(d ? 4 : 8, "avx2");
  if (target.avx512f) add_variant(d ? 8 : 16, "avx512f");
  std::string attr =
      fmt::format("nounwind memory(none) \"vector-function-abi-variant\"=\"{}\"", fmt::join(variants, ","));
  auto [it, fresh] = attr_index.try_emplace(attr, static_cast<int>(attr_groups.size()) + 1);
  if (fresh) attr_groups.push_back(fmt::format("attributes #{} = {{ {} }}", it->second, attr));
  std::string args = fmt::format("{} {}", ll(t), x.as(t));
  if (y) args += fmt::format(", {} {}", ll(t), y->as(t));
  return inst(t, fmt::format("call {} @{}({}) #{}", ll(t), scalar, args, it->second));
}
Val Emitter::intrinsic(const char* name, const Val& x) {
  std::string fn = fmt::format("llvm.{}.{}", name, x.ty == Ty::F32 ? "f32" : "f64");
  decls.insert(fmt::format("declare {} @{}({})", ll(x.ty), fn, ll(x.ty)));
  return inst(x.ty, fmt::format("call {} @{}({} {})", ll(x.ty), fn, ll(x.ty), x.r));
}

#define KILN_SLEEF_MATH(X) X(log) X(log1p) X(expm1) X(sin) X(cos)
#define KILN_DEFINE(fn) \
  Val fn(const Val& x) { return x.e->math(MathFn{#fn}, x); }
KILN_SLEEF_MATH(KILN_DEFINE)
#undef KILN_DEFINE
#undef KILN_SLEEF_MATH

namespace {

// a * b + c, rounded once.
Val fma(const Val& a, const Val& b, const Val& c) {
  Emitter* e = !a.number ? a.e : !b.number ? b.e : c.e;
  Ty t = !a.number ? a.ty : !b.number ? b.ty : c.ty;
  const char* fn = t == Ty::F32 ? "llvm.fma.f32" : "llvm.fma.f64";
  e->decls.insert(fmt::format("declare {0} @{1}({0}, {0}, {0})", ll(t), fn));
  return e->inst(t, fmt::format("call {0} @{1}({0} {2}, {0} {3}, {0} {4})", ll(t), fn, a.as(t), b.as(t), c.as(t)));
}
Val min_max(const char* name, const Val& x, const Val& bound) {  // llvm.minnum/maxnum: NaN gives bound
  std::string fn = fmt::format("llvm.{}.{}", name, x.ty == Ty::F32 ? "f32" : "f64");
  x.e->decls.insert(fmt::format("declare {0} @{1}({0}, {0})", ll(x.ty), fn));
  return x.e->inst(x.ty, fmt::format("call {0} @{1}({0} {2}, {0} {3})", ll(x.ty), fn, x.r, bound.as(x.ty)));
}

// |m| with the sign of s (f32).
Val copysign(const Val& m, const Val& s) {
  s.e->decls.insert("declare float @llvm.copysign.f32(float, float)");
  return s.e->inst(Ty::F32, fmt::format("call float @llvm.copysign.f32(float {}, float {})", m.r, s.r));
}

}  // namespace

// f32 exp inline, as a SLEEF call per vector costs the row-wise kernels (softmax) most of their
// time: behind a call the loop keeps its accumulators in memory and cannot overlap iterations.
// Cephes' expf: n = rint(x / ln 2), r = x - n ln 2 in two parts, exp(r) from a degree-7
// polynomial, then times 2^n as two powers of two (so results down to the smallest subnormal
// round once). Under -104 the result is 0; NaN stays NaN (through r); overflow gives inf. 1 ULP
// at worst against a double reference over every 7th float (as SLEEF's u10; the fused test
// checks a sweep), so it may differ from eager's SLEEF in the last bit.
Val exp(const Val& x) {
  if (x.ty != Ty::F32) return x.e->math(MathFn{"exp"}, x);
  Emitter& e = *x.e;
  Val n = min_max("minnum", min_max("maxnum", e.intrinsic("rint", x * Val(1.44269504088896341)), Val(-252)), Val(254));
  Val r = fma(n, Val(2.12194440e-4), fma(n, Val(-0.693359375), x));
  Val p = fma(Val(1.9875691500e-4), r, Val(1.3981999507e-3));
  for (double c : {8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}) p = fma(p, r, Val(c));
  Val y = fma(p, r * r, r) + Val(1);
  // 2^n as 2^h * 2^(n-h), h = floor(n/2): each factor a normal float (|n| <= 254 by the clamp)
  Val ni = e.inst(Ty::I32, fmt::format("fptosi float {} to i32", n.r));
  Val h = e.inst(Ty::I32, fmt::format("ashr i32 {}, 1", ni.r));
  auto pow2 = [&](const Val& k) {
    Val bits = e.inst(Ty::I32, fmt::format("shl i32 {}, 23", (k + Val(127)).r));
    return e.inst(Ty::F32, fmt::format("bitcast i32 {} to float", bits.r));
  };
  Val scaled = y * pow2(h) * pow2(ni - h);
  return select(x < Val(-104), Val(&e, literal(0, Ty::F32), Ty::F32), scaled);
}
// f32 tanh from exp, as SLEEF's vector tanhf costs three times its expf (the gelu chain would
// not reach memory bandwidth): for |x| < 0.625 Cephes' odd polynomial, else
// sign(x) * (1 - 2 / (exp(2|x|) + 1)), which cancels nothing there. NaN stays NaN; the error
// against a double reference is under 2 ULP (1.2 measured, tests/jit/fused_test.cpp).
Val tanh(const Val& x) {
  if (x.ty != Ty::F32) return x.e->math(MathFn{"tanh"}, x);
  Val a = fabs(x), z = x * x;
  Val p = fma(Val(-5.70498872745e-3), z, Val(2.06390887954e-2));
  p = fma(p, z, Val(-5.37397155531e-2));
  p = fma(p, z, Val(1.33314422036e-1));
  p = fma(p, z, Val(-3.33332819422e-1));
  Val poly = fma(p * z, x, x);
  Val big = Val(1) - Val(2) / (exp(a * Val(2)) + Val(1));
  return select(a < Val(0.625), poly, copysign(big, x));
}
// f32 erf inline, as SLEEF's vector erff took most of the exact gelu kernel's time. For
// |x| < 1.3, x + x * P(x^2) (P of degree 7, its constant term less 1, so the leading x is
// exact); for 1.3 <= |x| < 3.92, 1 - exp(Q(|x| - 2.6)), Q of degree 8 fitted to log(erfc);
// beyond, 1 (erfc is under half an ulp of 1 there). The coefficients are least-squares fits on
// Chebyshev nodes in double, rounded to float. NaN stays NaN. Under 2 ULP against a double
// reference (tests/jit/fused_test.cpp sweeps it), where eager's SLEEF erff is within 1.
Val erf(const Val& x) {
  if (x.ty != Ty::F32) return x.e->math(MathFn{"erf"}, x);
  static constexpr double kSmall[] = {-7.22872891856241e-06, 0.00010214734356850386, -0.0008303425274789333,
                                      0.005205472465604544,  -0.026858525350689888,  0.11283638328313828,
                                      -0.3761262893676758,   0.12837916612625122};
  static constexpr double kLarge[] = {1.5679811440350022e-06,  -1.1939442629227415e-05, 6.870251672808081e-05,
                                      -0.00037663994589820504, 0.001966042909771204,    -0.010032780468463898,
                                      -0.9470252990722656,     -5.541776657104492,      -8.351532936096191};
  auto horner = [](const double* c, size_t n, const Val& v) {
    Val p = fma(Val(c[0]), v, Val(c[1]));
    for (size_t k = 2; k < n; ++k) p = fma(p, v, Val(c[k]));
    return p;
  };
  Val a = fabs(x);
  Val small = fma(horner(kSmall, std::size(kSmall), a * a), a, a);
  Val large = Val(1) - exp(horner(kLarge, std::size(kLarge), a - Val(2.6)));
  Val m = select(a < Val(1.3), small, select(a < Val(3.92), large, Val(1)));
  return select(x != x, x, copysign(m, x));
}
Val pow(const Val& x, const Val& y) {
  Emitter* e = x.number ? y.e : x.e;
  return e->math(MathFn{"pow", true}, x, &y);
}
Val sqrt(const Val& x) { return x.e->intrinsic("sqrt", x); }
// Integers are already whole numbers.
Val floor(const Val& x) { return is_fp(x.ty) ? x.e->intrinsic("floor", x) : x; }
Val ceil(const Val& x) { return is_fp(x.ty) ? x.e->intrinsic("ceil", x) : x; }
Val rint(const Val& x) { return is_fp(x.ty) ? x.e->intrinsic("rint", x) : x; }
Val fabs(const Val& x) {
  if (is_fp(x.ty)) return x.e->intrinsic("fabs", x);
  if (x.ty == Ty::I8) return x;  // unsigned
  return select(x < Val(0), -x, x);
}

}  // namespace kiln::codegen::llvm_ir
