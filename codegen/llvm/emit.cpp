// codegen/llvm/emit.cpp -- lowers a fused group to LLVM IR text.
//
// The code is written plainly (loop counters and accumulators in allocas, scalar math calls);
// the O3 pipeline in compile.cpp promotes them to registers, hoists what is invariant and
// vectorizes the inner loops. Each scalar SLEEF call carries the vector variants the host can
// run ("vector-function-abi-variant"), so the loop vectorizer widens transcendentals too.
// Reductions combine with `reassoc` adds/multiplies so that they vectorize: their order differs
// from the eager kernels', within float rounding.
//
// Loop structure, for a layout of rank r:
// - no reduction: one loop nest over all dims, storing every output per element;
// - reductions over trailing dims: for each kept index, one pass over the reduced dims per
//   reduction level (softmax: max, then sum), then a last pass that stores the full outputs;
//   reduced outputs are stored after the pass that completes them;
// - reductions over other dims (no ops after them in the group): when the innermost dim is
//   reduced, as above; else outputs start at the identity, then one loop nest over all dims
//   combines each element into its output (the innermost loop runs over kept indices).
#include "codegen/llvm/emit.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "ir/fusion.h"
#include "ir/graph.h"
#include "runtime/check.h"
#include "runtime/ops/formulas.h"

namespace kiln::codegen {
namespace {

enum class Ty : uint8_t { F32, F64, I8, I16, I32, I64 };
const char* ll(Ty t) {
  switch (t) {
    case Ty::F32: return "float";
    case Ty::F64: return "double";
    case Ty::I8: return "i8";
    case Ty::I16: return "i16";
    case Ty::I32: return "i32";
    case Ty::I64: return "i64";
  }
  return "?";
}
bool is_fp(Ty t) { return t == Ty::F32 || t == Ty::F64; }
// Registers hold bool and u8 as i8 (bool as 0 or 1); both convert as unsigned. f16 and bf16
// values live in float registers (holding a value the 16-bit type has), in memory as i16.
bool is_half(DType d) { return d == DType::F16 || d == DType::BF16; }
Ty ty_of(DType d) {
  switch (d) {
    case DType::F32: case DType::F16: case DType::BF16: return Ty::F32;
    case DType::F64: return Ty::F64;
    case DType::I32: return Ty::I32;
    case DType::I64: return Ty::I64;
    case DType::U8: case DType::Bool: return Ty::I8;
    default: break;
  }
  throw Error(fmt::format("codegen: fused kernels do not handle {}", dtype_name(d)));
}

// How a dtype is stored.
Ty mem_ty(DType d) { return is_half(d) ? Ty::I16 : ty_of(d); }

// An integer literal of type t (i8 and i32 keep the low bits).
std::string int_literal(int64_t i, Ty t) {
  if (t == Ty::I8) return std::to_string(static_cast<int8_t>(static_cast<uint8_t>(i & 0xff)));  // wraps
  if (t == Ty::I32) return std::to_string(static_cast<int32_t>(static_cast<uint32_t>(i & 0xffffffff)));
  return std::to_string(i);
}

// An exact literal: floats as the hex of their double value (rounded to float first).
std::string literal(double v, Ty t) {
  if (is_fp(t)) {
    double d = t == Ty::F32 ? static_cast<double>(static_cast<float>(v)) : v;
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    return fmt::format("0x{:016X}", bits);
  }
  // Integers: truncated toward zero, saturating at the ends of i64 (a C cast would be undefined).
  if (std::isnan(v)) return "0";
  if (v >= 9223372036854775807.0) return std::to_string(std::numeric_limits<int64_t>::max());
  if (v <= -9223372036854775808.0) return std::to_string(std::numeric_limits<int64_t>::lowest());
  return int_literal(static_cast<int64_t>(v), t);
}

// A constant of dtype t: integers read as integers (every bit of an i64 past 2^53 kept).
std::string literal(const Scalar& v, DType t) {
  return is_float(t) ? literal(v.to<double>(), ty_of(t)) : int_literal(v.to<int64_t>(), ty_of(t));
}

struct Emitter;

// The scalar algebra the formulas run on: a register (or literal) of type ty, or a number not
// yet typed (formula constants: T(0.5)), typed by the operand it meets.
struct Val {
  Emitter* e = nullptr;
  std::string r;
  Ty ty = Ty::F64;
  bool number = false;
  double c = 0;
  Val() = default;
  Val(double v) : number(true), c(v) {}  // NOLINT: formulas write T(1)
  Val(Emitter* em, std::string reg, Ty t) : e(em), r(std::move(reg)), ty(t) {}
  std::string as(Ty t) const { return number ? literal(c, t) : r; }
};
struct Mask {
  Emitter* e = nullptr;
  std::string r;
};

struct MathFn {
  const char* name;  // SLEEF's base name: exp -> Sleef_expf1_u10purecfma
  bool two_args = false;
};

struct Emitter {
  const MathTarget& target;
  std::string text;
  int next = 0;
  std::set<std::string> decls;
  std::vector<std::string> attr_groups;  // "#k = { ... }"
  std::map<std::string, int> attr_index;

  explicit Emitter(const MathTarget& t) : target(t) {}

  std::string allocas;  // all in the entry block, where mem2reg promotes them
  std::set<std::string> vector_fns;  // kept alive until the loop vectorizer has used them
  bool f64_math = false;             // a double math call: vectorize at double width
  int loop_mds = 0;                  // innermost loops, each with its !llvm.loop node
  std::vector<bool> loop_reduces;    // per innermost loop: it carries a reduction's accumulator

  std::string reg() { return fmt::format("%r{}", next++); }
  std::string alloca_of(Ty t, const char* name) {
    std::string r = fmt::format("%{}{}", name, next++);
    allocas += fmt::format("  {} = alloca {}\n", r, ll(t));
    return r;
  }
  std::string label() { return fmt::format("b{}", next++); }
  void line(const std::string& s) { text += "  " + s + "\n"; }
  void block(const std::string& l) { text += l + ":\n"; }
  Val inst(Ty t, const std::string& rhs) {
    std::string r = reg();
    line(r + " = " + rhs);
    return Val(this, r, t);
  }

  Val convert(const Val& v, Ty from, Ty to, bool from_unsigned) {
    if (v.number) return Val(v.c);
    if (from == to) return v;
    const char* a = ll(from);
    const char* b = ll(to);
    if (is_fp(from) && is_fp(to))
      return inst(to, fmt::format("{} {} {} to {}", from == Ty::F32 ? "fpext" : "fptrunc", a, v.r, b));
    if (!is_fp(from) && is_fp(to))
      return inst(to, fmt::format("{} {} {} to {}", from_unsigned ? "uitofp" : "sitofp", a, v.r, b));
    if (is_fp(from)) {
      // To an integer as eager's convert does: toward zero, saturating at the target's ends,
      // NaN to 0 (a plain fptosi of an out-of-range value is poison). The one 8-bit integer
      // dtype is u8 (bool never gets here: cast() compares instead).
      std::string fn = fmt::format("llvm.{}.sat.{}.{}", to == Ty::I8 ? "fptoui" : "fptosi", b, a);
      decls.insert(fmt::format("declare {} @{}({})", b, fn, a));
      return inst(to, fmt::format("call {} @{}({} {})", b, fn, a, v.r));
    }
    auto bits = [](Ty t) { return t == Ty::I8 ? 8 : t == Ty::I16 ? 16 : t == Ty::I32 ? 32 : 64; };
    if (bits(from) < bits(to))
      return inst(to, fmt::format("{} {} {} to {}", from_unsigned ? "zext" : "sext", a, v.r, b));
    return inst(to, fmt::format("trunc {} {} to {}", a, v.r, b));
  }
  // Any dtype to any dtype, case by case as runtime/dtype.h's CastKind says (eager's rule).
  Val cast(const Val& v, DType from, DType to) {
    DType held = is_half(from) ? DType::F32 : from;  // the register of an f16 or bf16 holds a float
    bool uns = from == DType::U8 || from == DType::Bool;
    switch (cast_kind(from, to)) {
      case CastKind::Same: return v;
      case CastKind::ToBool: {
        Ty f = ty_of(held);
        std::string c = is_fp(f) ? fmt::format("fcmp une {} {}, {}", ll(f), v.as(f), literal(0, f))
                                 : fmt::format("icmp ne {} {}, 0", ll(f), v.as(f));
        return bool_of(Mask{this, inst(Ty::I8, c).r});
      }
      case CastKind::FloatToFloat:
      case CastKind::IntToFloat:
      case CastKind::FromBool:
        if (is_half(to)) return round_to(convert(v, ty_of(held), Ty::F32, uns), to);
        return convert(v, ty_of(held), ty_of(to), uns);
      case CastKind::FloatToInt:  // llvm.fpto[su]i.sat: toward zero, saturating, NaN to 0
      case CastKind::IntToInt: return convert(v, ty_of(held), ty_of(to), uns);
    }
    throw InternalError("codegen: unknown cast");
  }
  Val bool_of(const Mask& m) { return inst(Ty::I8, fmt::format("zext i1 {} to i8", m.r)); }

  // f16 and bf16, as runtime/half.h converts (round to nearest even; NaN kept quiet; f16's
  // subnormals through a float add): the bits of float register x in dtype t, and back.
  Val half_bits(const Val& x, DType t) {
    Val xi = inst(Ty::I32, fmt::format("bitcast float {} to i32", x.as(Ty::F32)));
    auto i32 = [&](const std::string& rhs) { return inst(Ty::I32, rhs).r; };
    auto sel = [&](const std::string& c, const std::string& a, const std::string& b) {
      return i32(fmt::format("select i1 {}, i32 {}, i32 {}", c, a, b));
    };
    std::string bits;
    if (t == DType::BF16) {
      std::string mag = i32(fmt::format("and i32 {}, 2147483647", xi.r));
      std::string nan = inst(Ty::I8, fmt::format("icmp ugt i32 {}, 2139095040", mag)).r;
      std::string top = i32(fmt::format("lshr i32 {}, 16", xi.r));
      std::string quiet = i32(fmt::format("or i32 {}, 64", top));
      std::string odd = i32(fmt::format("and i32 {}, 1", top));
      std::string bias = i32(fmt::format("add i32 {}, 32767", odd));
      std::string rounded = i32(fmt::format("lshr i32 {}, 16", i32(fmt::format("add i32 {}, {}", xi.r, bias))));
      bits = sel(nan, quiet, rounded);
    } else {
      std::string sign = i32(fmt::format("and i32 {}, 32768", i32(fmt::format("lshr i32 {}, 16", xi.r))));
      std::string mag = i32(fmt::format("and i32 {}, 2147483647", xi.r));
      std::string special = inst(Ty::I8, fmt::format("icmp uge i32 {}, 2139095040", mag)).r;
      std::string nan = inst(Ty::I8, fmt::format("icmp ugt i32 {}, 2139095040", mag)).r;
      std::string spec_bits = sel(nan, "32256", "31744");  // 0x7e00, 0x7c00
      std::string big = inst(Ty::I8, fmt::format("icmp uge i32 {}, 1199570944", mag)).r;  // 65536
      std::string tiny = inst(Ty::I8, fmt::format("icmp ult i32 {}, 947912704", mag)).r;
      std::string magf = inst(Ty::F32, fmt::format("bitcast i32 {} to float", mag)).r;
      std::string plus = inst(Ty::F32, fmt::format("fadd float {}, 0x3FE0000000000000", magf)).r;
      std::string sub = i32(fmt::format("sub i32 {}, 1056964608", i32(fmt::format("bitcast float {} to i32", plus))));
      std::string odd = i32(fmt::format("and i32 {}, 1", i32(fmt::format("lshr i32 {}, 13", mag))));
      std::string rebias = i32(fmt::format("add i32 {}, {}", mag, i32(fmt::format("add i32 {}, -939520001", odd))));
      std::string normal = i32(fmt::format("lshr i32 {}, 13", rebias));
      std::string v = sel(tiny, sub, normal);
      v = sel(big, "31744", v);
      v = sel(special, spec_bits, v);
      bits = i32(fmt::format("or i32 {}, {}", sign, v));
    }
    return inst(Ty::I16, fmt::format("trunc i32 {} to i16", bits));
  }
  Val half_value(const Val& h, DType t) {
    Val w = inst(Ty::I32, fmt::format("zext i16 {} to i32", h.r));
    auto i32 = [&](const std::string& rhs) { return inst(Ty::I32, rhs).r; };
    if (t == DType::BF16) return inst(Ty::F32, fmt::format("bitcast i32 {} to float", i32(fmt::format("shl i32 {}, 16", w.r))));
    std::string sign = i32(fmt::format("shl i32 {}, 16", i32(fmt::format("and i32 {}, 32768", w.r))));
    std::string exp = i32(fmt::format("and i32 {}, 31", i32(fmt::format("lshr i32 {}, 10", w.r))));
    std::string man = i32(fmt::format("and i32 {}, 1023", w.r));
    std::string man13 = i32(fmt::format("shl i32 {}, 13", man));
    std::string inf = i32(fmt::format("or i32 {}, {}", i32(fmt::format("or i32 {}, 2139095040", sign)), man13));
    std::string normal = i32(fmt::format("or i32 {}, {}", i32(fmt::format("or i32 {}, {}", sign,
        i32(fmt::format("shl i32 {}, 23", i32(fmt::format("add i32 {}, 112", exp)))))), man13));
    std::string is_inf = inst(Ty::I8, fmt::format("icmp eq i32 {}, 31", exp)).r;
    std::string bits = i32(fmt::format("select i1 {}, i32 {}, i32 {}", is_inf, inf, normal));
    Val f = inst(Ty::F32, fmt::format("bitcast i32 {} to float", bits));
    // zero or subnormal: man * 2^-24, with the sign
    std::string sv = inst(Ty::F32, fmt::format("fmul float {}, 0x3E70000000000000",
                                               inst(Ty::F32, fmt::format("uitofp i32 {} to float", man)).r)).r;
    std::string neg = inst(Ty::F32, fmt::format("fneg float {}", sv)).r;
    std::string has_sign = inst(Ty::I8, fmt::format("icmp ne i32 {}, 0", sign)).r;
    std::string sub = inst(Ty::F32, fmt::format("select i1 {}, float {}, float {}", has_sign, neg, sv)).r;
    std::string is_sub = inst(Ty::I8, fmt::format("icmp eq i32 {}, 0", exp)).r;
    return inst(Ty::F32, fmt::format("select i1 {}, float {}, float {}", is_sub, sub, f.r));
  }
  // A float rounded to dtype t's precision and range, kept in a float register.
  Val round_to(const Val& x, DType t) {
    Val xf = x.number ? Val(this, literal(x.c, Ty::F32), Ty::F32) : x;
    return half_value(half_bits(xf, t), t);
  }

  // A call to a SLEEF scalar function with the host's vector variants attached.
  Val math(const MathFn& f, const Val& x, const Val* y = nullptr) {
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
    std::string attr = fmt::format("nounwind memory(none) \"vector-function-abi-variant\"=\"{}\"",
                                   fmt::join(variants, ","));
    auto [it, fresh] = attr_index.try_emplace(attr, static_cast<int>(attr_groups.size()) + 1);
    if (fresh) attr_groups.push_back(fmt::format("attributes #{} = {{ {} }}", it->second, attr));
    std::string args = fmt::format("{} {}", ll(t), x.as(t));
    if (y) args += fmt::format(", {} {}", ll(t), y->as(t));
    return inst(t, fmt::format("call {} @{}({}) #{}", ll(t), scalar, args, it->second));
  }
  Val intrinsic(const char* name, const Val& x) {
    std::string fn = fmt::format("llvm.{}.{}", name, x.ty == Ty::F32 ? "f32" : "f64");
    decls.insert(fmt::format("declare {} @{}({})", ll(x.ty), fn, ll(x.ty)));
    return inst(x.ty, fmt::format("call {} @{}({} {})", ll(x.ty), fn, ll(x.ty), x.r));
  }
};

// The type two operands meet at, and the emitter (one of them is a register).
std::pair<Emitter*, Ty> meet(const Val& a, const Val& b) {
  if (!a.number) return {a.e, a.ty};
  return {b.e, b.ty};
}

Val arith(const Val& a, const Val& b, const char* fop, const char* iop, double folded) {
  if (a.number && b.number) return Val(folded);
  auto [e, t] = meet(a, b);
  return e->inst(t, fmt::format("{} {} {}, {}", is_fp(t) ? fop : iop, ll(t), a.as(t), b.as(t)));
}
Val operator+(const Val& a, const Val& b) { return arith(a, b, "fadd", "add", a.c + b.c); }
Val operator-(const Val& a, const Val& b) { return arith(a, b, "fsub", "sub", a.c - b.c); }
Val operator*(const Val& a, const Val& b) { return arith(a, b, "fmul", "mul", a.c * b.c); }
Val operator/(const Val& a, const Val& b) {
  if (a.number && b.number) return Val(a.c / b.c);
  auto [e, t] = meet(a, b);
  KILN_CHECK(is_fp(t), "codegen: integer division is not a pointwise op");
  return e->inst(t, fmt::format("fdiv {} {}, {}", ll(t), a.as(t), b.as(t)));
}
Val operator-(const Val& a) {
  if (a.number) return Val(-a.c);
  if (is_fp(a.ty)) return a.e->inst(a.ty, fmt::format("fneg {} {}", ll(a.ty), a.r));
  return a.e->inst(a.ty, fmt::format("sub {} 0, {}", ll(a.ty), a.r));
}

Mask compare(const Val& a, const Val& b, const char* f, const char* s, const char* u) {
  KILN_CHECK(!(a.number && b.number), "codegen: a comparison of two numbers");
  auto [e, t] = meet(a, b);
  const char* op = is_fp(t) ? f : t == Ty::I8 ? u : s;
  std::string r = e->reg();
  e->line(fmt::format("{} = {} {} {} {}, {}", r, is_fp(t) ? "fcmp" : "icmp", op, ll(t), a.as(t), b.as(t)));
  return Mask{e, r};
}
Mask operator==(const Val& a, const Val& b) { return compare(a, b, "oeq", "eq", "eq"); }
Mask operator!=(const Val& a, const Val& b) { return compare(a, b, "une", "ne", "ne"); }
Mask operator<(const Val& a, const Val& b) { return compare(a, b, "olt", "slt", "ult"); }
Mask operator<=(const Val& a, const Val& b) { return compare(a, b, "ole", "sle", "ule"); }
Mask operator>(const Val& a, const Val& b) { return compare(a, b, "ogt", "sgt", "ugt"); }
Mask operator>=(const Val& a, const Val& b) { return compare(a, b, "oge", "sge", "uge"); }
Mask operator&(const Mask& a, const Mask& b) {
  std::string r = a.e->reg();
  a.e->line(fmt::format("{} = and i1 {}, {}", r, a.r, b.r));
  return Mask{a.e, r};
}
Mask operator|(const Mask& a, const Mask& b) {
  std::string r = a.e->reg();
  a.e->line(fmt::format("{} = or i1 {}, {}", r, a.r, b.r));
  return Mask{a.e, r};
}
Val select(const Mask& m, const Val& a, const Val& b) {
  KILN_CHECK(!(a.number && b.number), "codegen: a select between two numbers");
  auto [e, t] = meet(a, b);
  return e->inst(t, fmt::format("select i1 {}, {} {}, {} {}", m.r, ll(t), a.as(t), ll(t), b.as(t)));
}

#define KILN_SLEEF_MATH(X) X(log) X(log1p) X(expm1) X(sin) X(cos)
#define KILN_DEFINE(fn) \
  Val fn(const Val& x) { return x.e->math(MathFn{#fn}, x); }
KILN_SLEEF_MATH(KILN_DEFINE)
#undef KILN_DEFINE
#undef KILN_SLEEF_MATH
Val fabs(const Val& x);

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
  static constexpr double kSmall[] = {
      -7.22872891856241e-06, 0.00010214734356850386, -0.0008303425274789333, 0.005205472465604544,
      -0.026858525350689888, 0.11283638328313828, -0.3761262893676758, 0.12837916612625122};
  static constexpr double kLarge[] = {
      1.5679811440350022e-06, -1.1939442629227415e-05, 6.870251672808081e-05,
      -0.00037663994589820504, 0.001966042909771204, -0.010032780468463898, -0.9470252990722656,
      -5.541776657104492, -8.351532936096191};
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

// A formula's result as a value: comparisons give masks, held as bool (0 or 1).
Val result(Emitter&, const Val& v) { return v; }
Val result(Emitter& e, const Mask& m) { return e.bool_of(m); }

template <class Fm, size_t... K>
Val apply_formula(Emitter& e, const std::vector<Val>& a, std::index_sequence<K...>) {
  return result(e, Fm::f(a[K]...));
}

Val pointwise(Emitter& e, OpId op, const std::vector<Val>& a) {
  switch (op) {
#define KILN_CASE_Pointwise(Name, arity) \
  case OpId::Name: return apply_formula<fm::Name>(e, a, std::make_index_sequence<arity>());
#define KILN_CASE_Cast(Name, arity)
#define KILN_CASE_Reduce(Name, arity)
#define KILN_CASE_View(Name, arity)
#define KILN_CASE_Copy(Name, arity)
#define KILN_CASE_Other(Name, arity)
#define OP(Name, name, arity, family) KILN_CASE_##family(Name, arity)
#include "runtime/ops.def"
#undef OP
#undef KILN_CASE_Pointwise
#undef KILN_CASE_Cast
#undef KILN_CASE_Reduce
#undef KILN_CASE_View
#undef KILN_CASE_Copy
#undef KILN_CASE_Other
    default: break;
  }
  throw Error(fmt::format("codegen: {} is not a pointwise op", op_name(op)));
}

struct KernelEmitter {
  const ir::Graph& body;
  const KernelLayout& L;
  Emitter e;
  size_t n_in, n_out;
  std::vector<int> producer;    // body value -> node index, -1 for inputs
  std::vector<int> input_index; // body value -> input slot, -1 otherwise
  std::vector<int> level;       // reductions on the value's longest path
  std::vector<std::string> sizes;
  std::vector<std::vector<std::string>> strides;  // per operand, per dim ("" when known)
  std::vector<std::string> ptrs;
  std::map<uint32_t, std::string> acc;  // reduction node result -> its accumulator alloca
  struct Reduction {
    uint32_t value;
    OpId op;
    DType acc;
  };
  // A full value the last reduction pass computes anyway (softmax's exp(x - max)) that a full
  // output needs too: the pass stores it into that output, and the final pass reads it back
  // instead of computing it again. value -> output slot.
  std::map<uint32_t, size_t> stash;
  bool final_pass = false;
  bool reducing = false;  // emitting a reduction pass: its innermost loop interleaves

  KernelEmitter(const ir::Graph& b, const KernelLayout& l, const MathTarget& t)
      : body(b), L(l), e(t), n_in(b.inputs.size()), n_out(b.outputs.size()) {
    KILN_CHECK(L.inputs.size() == n_in && L.outputs.size() == n_out && L.rank >= 1 && L.rank <= 16,
               "codegen: layout does not fit the group ({} inputs, {} outputs)", n_in, n_out);
    producer.assign(b.types.size(), -1);
    input_index.assign(b.types.size(), -1);
    level.assign(b.types.size(), 0);
    for (size_t k = 0; k < n_in; ++k) input_index[b.inputs[k]] = static_cast<int>(k);
    for (size_t i = 0; i < b.nodes.size(); ++i) {
      const ir::Node& n = b.nodes[i];
      KILN_CHECK(n.kind == ir::NodeKind::Op || n.kind == ir::NodeKind::Const,
                 "codegen: a fused body holds only op and const nodes");
      producer[n.result] = static_cast<int>(i);
      int lv = 0;
      for (uint32_t v : n.inputs) lv = std::max(lv, level[v]);
      level[n.result] = lv + (n.kind == ir::NodeKind::Op && ir::fusible_reduction(n.op) ? 1 : 0);
    }
  }

  bool is_reduction(uint32_t v) const {
    int p = producer[v];
    return p >= 0 && body.nodes[p].kind == ir::NodeKind::Op && ir::fusible_reduction(body.nodes[p].op);
  }
  const OperandLayout& operand(size_t k) const { return k < n_in ? L.inputs[k] : L.outputs[k - n_in]; }
  DType operand_dtype(size_t k) const {
    return body.type(k < n_in ? body.inputs[k] : body.outputs[k - n_in]).dtype;
  }

  // The address of operand k's element at loop index `idx`.
  std::string address(size_t k, const std::vector<std::string>& idx) {
    const OperandLayout& o = operand(k);
    std::string off;
    for (int d = 0; d < L.rank; ++d) {
      if (o.broadcast >> d & 1 || idx[d] == "0") continue;
      std::string term = idx[d];
      if (!strides[k][d].empty()) term = e.inst(Ty::I64, fmt::format("mul i64 {}, {}", idx[d], strides[k][d])).r;
      off = off.empty() ? term : e.inst(Ty::I64, fmt::format("add i64 {}, {}", off, term)).r;
    }
    if (off.empty()) off = "0";
    Ty t = mem_ty(operand_dtype(k));
    return e.inst(Ty::I64, fmt::format("getelementptr {}, ptr {}, i64 {}", ll(t), ptrs[k], off)).r;
  }

  // Value v at loop index idx; memo holds what this loop body has computed already.
  Val value(uint32_t v, const std::vector<std::string>& idx, std::map<uint32_t, Val>& memo) {
    if (auto it = memo.find(v); it != memo.end()) return it->second;
    Val r;
    DType dt = body.type(v).dtype;
    auto stashed = final_pass ? stash.find(v) : stash.end();
    if (stashed != stash.end()) {
      r = load(address(n_in + stashed->second, idx), dt);
    } else if (input_index[v] >= 0) {
      r = load(address(static_cast<size_t>(input_index[v]), idx), dt);
    } else {
      const ir::Node& n = body.nodes.at(producer.at(v));
      if (n.kind == ir::NodeKind::Const) {
        std::string c = is_float(dt) ? literal(n.constant.to(DType::F64).item<double>(), ty_of(dt))
                                     : int_literal(n.constant.to(DType::I64).item<int64_t>(), ty_of(dt));
        r = Val(&e, c, ty_of(dt));
      } else if (ir::fusible_reduction(n.op)) {
        auto a = acc.find(v);
        KILN_CHECK(a != acc.end(), "codegen: reduction %{} used before its pass", v);
        Ty at = ty_of(accumulator_dtype(body.type(n.inputs[0]).dtype));
        Val x = e.inst(at, fmt::format("load {}, ptr {}", ll(at), a->second));
        r = e.cast(x, accumulator_dtype(body.type(n.inputs[0]).dtype), dt);
      } else if (op_family(n.op) == OpFamily::Cast) {
        r = e.cast(value(n.inputs[0], idx, memo), body.type(n.inputs[0]).dtype, dt);
      } else if (n.op == OpId::Reshape || n.op == OpId::Expand) {
        r = value(n.inputs[0], idx, memo);  // same element, by the group's construction
      } else if (op_family(n.op) == OpFamily::Pointwise) {
        // f16/bf16 ops compute in f32 (numbers too) and round their result, as eagerly.
        DType cd = is_half(n.attrs.dtype) ? DType::F32 : n.attrs.dtype;
        std::vector<Val> args;
        for (int k = 0; k < op_arity(n.op); ++k) {
          int t = input_of_slot(n.attrs.imm_mask, k);
          if (t < 0) {
            args.push_back(Val(&e, literal(n.attrs.imm[k], cd), ty_of(cd)));
          } else {
            uint32_t u = n.inputs.at(static_cast<size_t>(t));
            args.push_back(e.cast(value(u, idx, memo), body.type(u).dtype, cd));
          }
        }
        r = pointwise(e, n.op, args);
        bool mask = op_def(n.op).promote == Promote::Compare || op_def(n.op).promote == Promote::Logical;
        DType produced = mask ? DType::Bool : cd;
        if (!mask && is_half(n.attrs.dtype)) {
          r = e.round_to(r, n.attrs.dtype);
          produced = n.attrs.dtype;
        }
        if (!mask && cd == DType::Bool) r = e.cast(r, DType::U8, DType::Bool);  // true + true is true
        if (produced != dt) r = e.cast(r, produced, dt);
      } else {
        throw Error(fmt::format("codegen: {} cannot be part of a fused kernel", op_name(n.op)));
      }
    }
    memo[v] = r;
    return r;
  }

  void store(size_t out, const Val& v, const std::vector<std::string>& idx) {
    DType dt = body.type(body.outputs[out]).dtype;
    std::string p = address(n_in + out, idx);
    if (is_half(dt)) {  // the register already holds a value of dt: its bits, exactly
      Val f = v.number ? Val(&e, literal(v.c, Ty::F32), Ty::F32) : v;
      e.line(fmt::format("store i16 {}, ptr {}", e.half_bits(f, dt).r, p));
      return;
    }
    Ty t = ty_of(dt);
    e.line(fmt::format("store {} {}, ptr {}", ll(t), v.as(t), p));
  }
  Val load(const std::string& p, DType dt) {
    Ty t = mem_ty(dt);
    Val x = e.inst(t, fmt::format("load {}, ptr {}", ll(t), p));
    return is_half(dt) ? e.half_value(x, dt) : x;
  }

  // Picks stash entries: the input of a last-level reduction that some full output's final value
  // is computed from (not through a reduction), kept in that output (same dtype) between passes.
  template <class Full> void plan_stash(const std::vector<Reduction>& reds, int max_level, const Full& full_output) {
    std::vector<char> taken(n_out, 0);
    for (const Reduction& r : reds) {
      if (level[r.value] != max_level) continue;
      uint32_t v = body.nodes[producer[r.value]].inputs[0];
      if (producer[v] < 0 || body.nodes[producer[v]].kind != ir::NodeKind::Op || stash.count(v)) continue;
      for (size_t o = 0; o < n_out; ++o) {
        if (taken[o] || !full_output(o) || body.type(body.outputs[o]).dtype != body.type(v).dtype) continue;
        if (!reads(body.outputs[o], v)) continue;
        stash[v] = o;
        taken[o] = 1;
        break;
      }
    }
  }
  // Whether computing `from` per element reads `v` (reductions' results are loaded, not
  // computed, in the final pass).
  bool reads(uint32_t from, uint32_t v) const {
    if (from == v) return true;
    int p = producer[from];
    if (p < 0 || is_reduction(from)) return false;
    for (uint32_t u : body.nodes[static_cast<size_t>(p)].inputs)
      if (reads(u, v)) return true;
    return false;
  }

  // Emits nested loops over `dims` (in order) around body(idx).
  void loops(const std::vector<int>& dims, size_t at, std::vector<std::string>& idx,
             const std::function<void(std::vector<std::string>&)>& fn) {
    if (at == dims.size()) {
      fn(idx);
      return;
    }
    int d = dims[at];
    std::string counter = e.alloca_of(Ty::I64, "i");
    std::string lo = d == L.parallel_dim ? "%begin" : "0";
    std::string hi = d == L.parallel_dim ? "%end" : sizes[d];
    e.line(fmt::format("store i64 {}, ptr {}", lo, counter));
    std::string head = e.label(), loop = e.label(), done = e.label();
    e.line("br label %" + head);
    e.block(head);
    Val i = e.inst(Ty::I64, fmt::format("load i64, ptr {}", counter));
    Val c = e.inst(Ty::I8, fmt::format("icmp slt i64 {}, {}", i.r, hi));
    e.line(fmt::format("br i1 {}, label %{}, label %{}", c.r, loop, done));
    e.block(loop);
    std::string saved = idx[d];
    idx[d] = i.r;
    loops(dims, at + 1, idx, fn);
    idx[d] = saved;
    Val n = e.inst(Ty::I64, fmt::format("add nsw i64 {}, 1", i.r));
    e.line(fmt::format("store i64 {}, ptr {}", n.r, counter));
    // Innermost loops carry a vector width: LLVM's cost model prices calls to vector math
    // variants too high and would keep them scalar.
    if (at + 1 == dims.size()) {
      e.line(fmt::format("br label %{}, !llvm.loop !{}", head, 2 * e.loop_mds++));
      e.loop_reduces.push_back(reducing);
    } else {
      e.line("br label %" + head);
    }
    e.block(done);
  }

  // Prefetches the next kept index's row of each input read along it (softmax's next row), one
  // cache line at a time, while this row's passes compute from cache: else each row's loads wait
  // for memory after the last row's compute instead of beside it (softmax over [4096,1024] on 2
  // threads: 2.2 to 1.75 ms). For a single reduced dim, the innermost, read with unit stride.
  void prefetch_next_row(std::vector<std::string>& ix, const std::vector<int>& kept, const std::vector<int>& reduced) {
    int inner = L.rank - 1;
    if (kept.empty() || reduced.size() != 1 || reduced[0] != inner) return;
    int row = kept.back();
    std::vector<size_t> rows;
    int64_t widest = 1;
    for (size_t k = 0; k < n_in; ++k) {
      const OperandLayout& o = operand(k);
      if (o.broadcast >> row & 1 || o.broadcast >> inner & 1 || !o.unit_inner) continue;
      rows.push_back(k);
      widest = std::max(widest, dtype_size(operand_dtype(k)));
    }
    if (rows.empty()) return;
    e.decls.insert("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)");
    std::string saved = ix[row];
    ix[row] = e.inst(Ty::I64, fmt::format("add i64 {}, 1", saved)).r;
    std::string counter = e.alloca_of(Ty::I64, "pf");
    e.line(fmt::format("store i64 0, ptr {}", counter));
    std::string head = e.label(), body_label = e.label(), done = e.label();
    e.line("br label %" + head);
    e.block(head);
    Val j = e.inst(Ty::I64, fmt::format("load i64, ptr {}", counter));
    Val more = e.inst(Ty::I8, fmt::format("icmp slt i64 {}, {}", j.r, sizes[inner]));
    e.line(fmt::format("br i1 {}, label %{}, label %{}", more.r, body_label, done));
    e.block(body_label);
    ix[inner] = j.r;
    for (size_t k : rows) e.line(fmt::format("call void @llvm.prefetch.p0(ptr {}, i32 0, i32 3, i32 1)", address(k, ix)));
    ix[inner] = "0";
    e.line(fmt::format("store i64 {}, ptr {}", e.inst(Ty::I64, fmt::format("add i64 {}, {}", j.r, 64 / widest)).r, counter));
    e.line("br label %" + head);
    e.block(done);
    ix[row] = saved;
  }

  // The reduction's starting value, as the eager kernels start from (runtime/op.h).
  std::string identity(OpId op, DType t) {
    Scalar v = reduction_identity(op_def(op).combine, t);
    return is_float(t) ? literal(v.to_double(), ty_of(t)) : std::to_string(v.to_int());
  }
  // acc op x, vectorizable: reassociation allowed for float sums and products.
  Val combine(OpId op, DType t, const Val& a, const Val& x) {
    Ty ty = ty_of(t);
    bool f = is_fp(ty);
    const char* minmax = nullptr;
    switch (op_def(op).combine) {
      case Combine::Sum: return e.inst(ty, fmt::format("{} {} {}, {}", f ? "fadd reassoc" : "add", ll(ty), a.r, x.r));
      case Combine::Prod: return e.inst(ty, fmt::format("{} {} {}, {}", f ? "fmul reassoc" : "mul", ll(ty), a.r, x.r));
      case Combine::Max: minmax = f ? "maximum" : "smax"; break;
      case Combine::Min: minmax = f ? "minimum" : "smin"; break;
      case Combine::None: throw InternalError(fmt::format("codegen: {} is not a combining reduction", op_name(op)));
    }
    std::string fn = fmt::format("llvm.{}.{}", minmax, f ? (ty == Ty::F32 ? "f32" : "f64") : "i64");
    e.decls.insert(fmt::format("declare {0} @{1}({0}, {0})", ll(ty), fn));
    return e.inst(ty, fmt::format("call {0} @{1}({0} {2}, {0} {3})", ll(ty), fn, a.r, x.r));
  }

  std::string run(const std::string& symbol) {
    // Entry: sizes, strides and pointers.
    for (int d = 0; d < L.rank; ++d)
      sizes.push_back(e.inst(Ty::I64, fmt::format("load i64, ptr {}", d == 0 ? "%sizes"
          : e.inst(Ty::I64, fmt::format("getelementptr i64, ptr %sizes, i64 {}", d)).r)).r);
    size_t n_ops = n_in + n_out;
    strides.resize(n_ops);
    for (size_t k = 0; k < n_ops; ++k) {
      const OperandLayout& o = operand(k);
      for (int d = 0; d < L.rank; ++d) {
        if (o.broadcast >> d & 1 || (d == L.rank - 1 && o.unit_inner)) {
          strides[k].push_back("");
          continue;
        }
        Val p = e.inst(Ty::I64, fmt::format("getelementptr i64, ptr %strides, i64 {}", k * L.rank + d));
        strides[k].push_back(e.inst(Ty::I64, fmt::format("load i64, ptr {}", p.r)).r);
      }
      Val pp = e.inst(Ty::I64, fmt::format("getelementptr ptr, ptr %data, i64 {}", k));
      ptrs.push_back(e.inst(Ty::I64, fmt::format("load ptr, ptr {}", pp.r)).r);
    }

    std::vector<Reduction> reds;
    int max_level = 0;
    for (const ir::Node& n : body.nodes) {
      if (n.kind != ir::NodeKind::Op || !ir::fusible_reduction(n.op)) continue;
      reds.push_back({n.result, n.op, accumulator_dtype(body.type(n.inputs[0]).dtype)});
      max_level = std::max(max_level, level[n.result]);
    }
    std::vector<int> kept, reduced, all;
    for (int d = 0; d < L.rank; ++d) {
      (L.reduced >> d & 1 ? reduced : kept).push_back(d);
      all.push_back(d);
    }
    std::vector<std::string> idx(L.rank, "0");
    bool trailing = true;
    for (size_t k = 0; k + 1 < all.size(); ++k)
      if ((L.reduced >> k & 1) && !(L.reduced >> (k + 1) & 1)) trailing = false;

    auto full_output = [&](size_t o) { return operand(n_in + o).broadcast == 0 || L.reduced == 0; };
    if (trailing && !reds.empty()) plan_stash(reds, max_level, full_output);
    if (reds.empty()) {
      loops(all, 0, idx, [&](std::vector<std::string>& ix) {
        std::map<uint32_t, Val> memo;
        for (size_t o = 0; o < n_out; ++o) store(o, value(body.outputs[o], ix, memo), ix);
      });
    } else if (trailing || (L.reduced >> (L.rank - 1) & 1)) {
      // Per kept index, passes over the reduced dims (accumulating in registers). Also for
      // reductions over leading dims when the innermost dim is reduced too: combining each
      // element into its output in memory would chain every step of the innermost loop.
      loops(kept, 0, idx, [&](std::vector<std::string>& ix) {
        prefetch_next_row(ix, kept, reduced);
        for (int lv = 1; lv <= max_level; ++lv) {
          for (const Reduction& r : reds) {
            if (level[r.value] != lv) continue;
            std::string a = acc[r.value] = e.alloca_of(ty_of(r.acc), "acc");
            e.line(fmt::format("store {} {}, ptr {}", ll(ty_of(r.acc)), identity(r.op, r.acc), a));
          }
          reducing = true;
          loops(reduced, 0, ix, [&](std::vector<std::string>& jx) {
            std::map<uint32_t, Val> memo;
            for (const Reduction& r : reds) {
              if (level[r.value] != lv) continue;
              const ir::Node& n = body.nodes[producer[r.value]];
              Val in = value(n.inputs[0], jx, memo);
              if (auto st = stash.find(n.inputs[0]); st != stash.end() && lv == max_level) store(st->second, in, jx);
              Val x = e.cast(in, body.type(n.inputs[0]).dtype, r.acc);
              Ty at = ty_of(r.acc);
              Val cur = e.inst(at, fmt::format("load {}, ptr {}", ll(at), acc[r.value]));
              e.line(fmt::format("store {} {}, ptr {}", ll(at), combine(r.op, r.acc, cur, x).r, acc[r.value]));
            }
          });
          reducing = false;
          std::map<uint32_t, Val> memo;  // reduced outputs this pass completed, at reduced index 0
          for (size_t o = 0; o < n_out; ++o)
            if (!full_output(o) && level[body.outputs[o]] == lv) store(o, value(body.outputs[o], ix, memo), ix);
        }
        bool any_full = false;
        for (size_t o = 0; o < n_out; ++o) any_full = any_full || full_output(o);
        final_pass = true;
        if (any_full)
          loops(reduced, 0, ix, [&](std::vector<std::string>& jx) {
            std::map<uint32_t, Val> memo;
            for (size_t o = 0; o < n_out; ++o)
              if (full_output(o)) store(o, value(body.outputs[o], jx, memo), jx);
          });
        final_pass = false;
      });
    } else {
      // Outputs start at the identity (exact in the output's dtype: the accumulator's would
      // not be, INT64_MIN as an i32); then every element is combined into its output, in the
      // accumulator's dtype as the other loops combine.
      loops(kept, 0, idx, [&](std::vector<std::string>& ix) {
        for (size_t o = 0; o < n_out; ++o) {
          if (full_output(o)) continue;
          const ir::Node& n = body.nodes.at(producer.at(body.outputs[o]));
          DType dt = body.type(body.outputs[o]).dtype;
          store(o, Val(&e, identity(n.op, dt), ty_of(dt)), ix);
        }
      });
      loops(all, 0, idx, [&](std::vector<std::string>& ix) {
        std::map<uint32_t, Val> memo;
        for (size_t o = 0; o < n_out; ++o) {
          uint32_t v = body.outputs[o];
          if (full_output(o)) {
            store(o, value(v, ix, memo), ix);
            continue;
          }
          KILN_CHECK(is_reduction(v), "codegen: after a reduction over leading dims only its result can leave");
          const ir::Node& n = body.nodes[producer[v]];
          DType dt = body.type(v).dtype, in_dt = body.type(n.inputs[0]).dtype, acc_dt = accumulator_dtype(in_dt);
          Ty t = ty_of(dt);
          Val x = e.cast(value(n.inputs[0], ix, memo), in_dt, acc_dt);
          std::string p = address(n_in + o, ix);
          Val cur = e.cast(e.inst(t, fmt::format("load {}, ptr {}", ll(t), p)), dt, acc_dt);
          e.line(fmt::format("store {} {}, ptr {}", ll(t), e.cast(combine(n.op, acc_dt, cur, x), acc_dt, dt).r, p));
        }
      });
    }

    std::string out = fmt::format(
        "; kiln fused kernel: {} inputs, {} outputs, rank {}, reduced dims {:#x}, parallel dim {}\n",
        n_in, n_out, L.rank, L.reduced, L.parallel_dim);
    out += fmt::format(
        "define void @{}(ptr noalias nocapture readonly %sizes, ptr noalias nocapture readonly %strides, "
        "ptr noalias nocapture readonly %data, i64 %begin, i64 %end) #0 {{\nentry:\n",
        symbol);
    out += e.allocas + e.text;
    out += "  ret void\n}\n\n";
    for (const std::string& d : e.decls) out += d + "\n";
    if (!e.vector_fns.empty()) {
      std::vector<std::string> used;
      for (const std::string& f : e.vector_fns) used.push_back("ptr @" + f);
      out += fmt::format("@llvm.compiler.used = appending global [{} x ptr] [{}], section \"llvm.metadata\"\n",
                         used.size(), fmt::join(used, ", "));
    }
    out += "\nattributes #0 = { nounwind }\n";
    for (const std::string& a : e.attr_groups) out += a + "\n";
    int lanes = (e.target.avx512f ? 16 : e.target.avx2 ? 8 : 4) / (e.f64_math ? 2 : 1);
    // A reduction's loop also runs 4 vectors of accumulators at once: one would chain every
    // step through the add's (or the max's) latency (softmax's row passes: about 20% faster).
    int interleave = 2 * e.loop_mds;
    if (e.loop_mds > 0) out += fmt::format("!{} = !{{!\"llvm.loop.interleave.count\", i32 4}}\n", interleave);
    for (int k = 0; k < e.loop_mds; ++k)
      out += fmt::format("!{0} = distinct !{{!{0}, !{1}{3}}}\n!{1} = !{{!\"llvm.loop.vectorize.width\", i32 {2}}}\n", 2 * k,
                         2 * k + 1, lanes, e.loop_reduces[k] ? fmt::format(", !{}", interleave) : "");
    return out;
  }
};

}  // namespace

std::string emit_llvm_ir(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol,
                         const MathTarget& target) {
  KernelEmitter k(body, layout, target);
  return k.run(symbol);
}

}  // namespace kiln::codegen
