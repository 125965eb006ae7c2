// codegen/llvm/scalar.cpp -- the LLVM emitter's scalar algebra (codegen/llvm/scalar.h): IR types
// and exact literals, conversions and casts between dtypes (eager's rules), f16/bf16 bits, and
// the arithmetic, comparison and select the formulas are written with.
#include "codegen/llvm/scalar.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "codegen/lower.h"
#include "runtime/check.h"

namespace kiln::codegen::llvm_ir {

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
    case DType::F32:
    case DType::F16:
    case DType::BF16: return Ty::F32;
    case DType::F64: return Ty::F64;
    case DType::I32: return Ty::I32;
    case DType::I64: return Ty::I64;
    case DType::U8:
    case DType::Bool: return Ty::I8;
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

Val Emitter::convert(const Val& v, Ty from, Ty to, bool from_unsigned) {
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
  if (bits(from) < bits(to)) return inst(to, fmt::format("{} {} {} to {}", from_unsigned ? "zext" : "sext", a, v.r, b));
  return inst(to, fmt::format("trunc {} {} to {}", a, v.r, b));
}
// Any dtype to any dtype, case by case as runtime/dtype.h's CastKind says (eager's rule).
Val Emitter::cast(const Val& v, DType from, DType to) {
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
Val Emitter::bool_of(const Mask& m) { return inst(Ty::I8, fmt::format("zext i1 {} to i8", m.r)); }

// f16 and bf16, as runtime/half.h converts (round to nearest even; NaN kept quiet; f16's
// subnormals through a float add): the bits of float register x in dtype t, and back.
Val Emitter::half_bits(const Val& x, DType t) {
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
    std::string spec_bits = sel(nan, "32256", "31744");                                 // 0x7e00, 0x7c00
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
Val Emitter::half_value(const Val& h, DType t) {
  Val w = inst(Ty::I32, fmt::format("zext i16 {} to i32", h.r));
  auto i32 = [&](const std::string& rhs) { return inst(Ty::I32, rhs).r; };
  if (t == DType::BF16)
    return inst(Ty::F32, fmt::format("bitcast i32 {} to float", i32(fmt::format("shl i32 {}, 16", w.r))));
  std::string sign = i32(fmt::format("shl i32 {}, 16", i32(fmt::format("and i32 {}, 32768", w.r))));
  std::string exp = i32(fmt::format("and i32 {}, 31", i32(fmt::format("lshr i32 {}, 10", w.r))));
  std::string man = i32(fmt::format("and i32 {}, 1023", w.r));
  std::string man13 = i32(fmt::format("shl i32 {}, 13", man));
  std::string inf = i32(fmt::format("or i32 {}, {}", i32(fmt::format("or i32 {}, 2139095040", sign)), man13));
  std::string normal =
      i32(fmt::format("or i32 {}, {}",
                      i32(fmt::format("or i32 {}, {}", sign,
                                      i32(fmt::format("shl i32 {}, 23", i32(fmt::format("add i32 {}, 112", exp)))))),
                      man13));
  std::string is_inf = inst(Ty::I8, fmt::format("icmp eq i32 {}, 31", exp)).r;
  std::string bits = i32(fmt::format("select i1 {}, i32 {}, i32 {}", is_inf, inf, normal));
  Val f = inst(Ty::F32, fmt::format("bitcast i32 {} to float", bits));
  // zero or subnormal: man * 2^-24, with the sign
  std::string sv = inst(Ty::F32, fmt::format("fmul float {}, 0x3E70000000000000",
                                             inst(Ty::F32, fmt::format("uitofp i32 {} to float", man)).r))
                       .r;
  std::string neg = inst(Ty::F32, fmt::format("fneg float {}", sv)).r;
  std::string has_sign = inst(Ty::I8, fmt::format("icmp ne i32 {}, 0", sign)).r;
  std::string sub = inst(Ty::F32, fmt::format("select i1 {}, float {}, float {}", has_sign, neg, sv)).r;
  std::string is_sub = inst(Ty::I8, fmt::format("icmp eq i32 {}, 0", exp)).r;
  return inst(Ty::F32, fmt::format("select i1 {}, float {}, float {}", is_sub, sub, f.r));
}
// A float rounded to dtype t's precision and range, kept in a float register.
Val Emitter::round_to(const Val& x, DType t) {
  Val xf = x.number ? Val(this, literal(x.c, Ty::F32), Ty::F32) : x;
  return half_value(half_bits(xf, t), t);
}

namespace {

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

Mask compare(const Val& a, const Val& b, const char* f, const char* s, const char* u) {
  KILN_CHECK(!(a.number && b.number), "codegen: a comparison of two numbers");
  auto [e, t] = meet(a, b);
  const char* op = is_fp(t) ? f : t == Ty::I8 ? u : s;
  std::string r = e->reg();
  e->line(fmt::format("{} = {} {} {} {}, {}", r, is_fp(t) ? "fcmp" : "icmp", op, ll(t), a.as(t), b.as(t)));
  return Mask{e, r};
}

}  // namespace

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

Val pointwise(Emitter& e, OpId op, const std::vector<Val>& a) { return lower::apply_pointwise(e, op, a); }

}  // namespace kiln::codegen::llvm_ir
