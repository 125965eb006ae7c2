// codegen/cuda/emit_scalar.cpp -- the scalar algebra of the CUDA emitter (emit_scalar.h): the
// formulas of runtime/ops/formulas.h written out as CUDA C.
//
// Values are C temporaries, one per step, in the types registers hold: float for f32, f16 and
// bf16 (rounded to the 16-bit type after each op, as eagerly), double, int, long long, and
// unsigned char for u8 and bool (0 or 1). Integer arithmetic wraps (it is done in unsigned
// types, where C++ defines the wrap); float arithmetic is IEEE without fast math; float to
// integer conversion truncates and saturates with NaN giving 0 (runtime/dtype.h's CastKind).
#include "codegen/cuda/emit_scalar.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "codegen/lower.h"
#include "runtime/check.h"

namespace kiln::codegen::cuda_emit {

const char* cname(CT t) {
  switch (t) {
    case CT::F32: return "float";
    case CT::F64: return "double";
    case CT::I32: return "int";
    case CT::I64: return "long long";
    case CT::U8: return "unsigned char";
  }
  return "?";
}
bool is_fp(CT t) { return t == CT::F32 || t == CT::F64; }
bool is_half(DType d) { return d == DType::F16 || d == DType::BF16; }
CT ct_of(DType d) {
  switch (d) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return CT::F32;
    case DType::F64: return CT::F64;
    case DType::I32: return CT::I32;
    case DType::I64: return CT::I64;
    case DType::U8:
    case DType::Bool: return CT::U8;
  }
  throw Error(fmt::format("codegen: CUDA kernels do not handle {}", dtype_name(d)));
}
// How a dtype is stored in memory.
const char* mem_name(DType d) { return is_half(d) ? "unsigned short" : cname(ct_of(d)); }

// An integer literal of type t (int and unsigned char keep the low bits, as the LLVM emitter).
std::string int_literal(int64_t i, CT t) {
  switch (t) {
    case CT::U8: return fmt::format("(unsigned char){}u", static_cast<unsigned>(static_cast<uint8_t>(i & 0xff)));
    case CT::I32: return fmt::format("(int)0x{:x}u", static_cast<uint32_t>(i & 0xffffffff));
    default: return fmt::format("(long long)0x{:x}ull", static_cast<uint64_t>(i));
  }
}

// An exact literal: floats in hexadecimal (non-finite ones through their bits).
std::string literal(double v, CT t) {
  if (t == CT::F32) {
    float f = static_cast<float>(v);
    if (!std::isfinite(f)) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return fmt::format("kiln_f32(0x{:x}u)", b);
    }
    return fmt::format("{:a}f", f);
  }
  if (t == CT::F64) {
    if (!std::isfinite(v)) {
      uint64_t b;
      std::memcpy(&b, &v, 8);
      return fmt::format("kiln_f64(0x{:x}ull)", b);
    }
    return fmt::format("{:a}", v);
  }
  // Integers: truncated toward zero, saturating at the ends of i64, NaN to 0.
  if (std::isnan(v)) return int_literal(0, t);
  if (v >= 9223372036854775807.0) return int_literal(std::numeric_limits<int64_t>::max(), t);
  if (v <= -9223372036854775808.0) return int_literal(std::numeric_limits<int64_t>::lowest(), t);
  return int_literal(static_cast<int64_t>(v), t);
}

std::string literal(const Scalar& v, DType t) {
  return is_float(t) ? literal(v.to<double>(), ct_of(t)) : int_literal(v.to<int64_t>(), ct_of(t));
}

void Emitter::line(const std::string& s) { text += std::string(2 * indent, ' ') + s + "\n"; }
std::string Emitter::temp() { return fmt::format("v{}", next++); }
Val Emitter::def(CT t, const std::string& expr) {
  std::string r = temp();
  line(fmt::format("{} {} = {};", cname(t), r, expr));
  return Val(this, r, t);
}
Mask Emitter::mask(const std::string& expr) {
  std::string r = temp();
  line(fmt::format("bool {} = {};", r, expr));
  return Mask{this, r};
}
Val Emitter::bool_of(const Mask& m) { return def(CT::U8, fmt::format("(unsigned char)({} ? 1 : 0)", m.x)); }

// Between register types, as runtime/dtype.h's CastKind says for the dtypes they hold.
Val Emitter::convert(const Val& v, CT from, CT to) {
  if (v.number) return Val(v.c);
  if (from == to) return v;
  if (is_fp(from) && !is_fp(to)) {  // toward zero, saturating, NaN to 0
    const char* fn = to == CT::U8 ? "kiln_f2u8" : to == CT::I32 ? "kiln_f2i32" : "kiln_f2i64";
    return def(to, fmt::format("{}((double){})", fn, v.x));
  }
  return def(to, fmt::format("({}){}", cname(to), v.x));  // C's conversions: IEEE, or modular
}
Val Emitter::cast(const Val& v, DType from, DType to) {
  DType held = is_half(from) ? DType::F32 : from;
  switch (cast_kind(from, to)) {
    case CastKind::Same: return v;
    case CastKind::ToBool: {
      CT f = ct_of(held);
      return def(CT::U8, fmt::format("(unsigned char)({} != {} ? 1 : 0)", v.as(f), literal(0, f)));
    }
    case CastKind::FloatToFloat:
    case CastKind::IntToFloat:
    case CastKind::FromBool:
      if (is_half(to)) return round_to(convert(v, ct_of(held), CT::F32), to);
      return convert(v, ct_of(held), ct_of(to));
    case CastKind::FloatToInt:
    case CastKind::IntToInt: return convert(v, ct_of(held), ct_of(to));
  }
  throw InternalError("codegen: unknown cast");
}
// A float rounded to f16 or bf16 (round to nearest even), kept in a float.
Val Emitter::round_to(const Val& x, DType t) {
  std::string f = x.number ? literal(x.c, CT::F32) : x.x;
  return t == DType::F16 ? def(CT::F32, fmt::format("kiln_h2f(kiln_f2h({}))", f))
                         : def(CT::F32, fmt::format("kiln_bf2f(kiln_f2bf({}))", f));
}
Val Emitter::math(const char* name, const Val& x, const Val* y) {
  CT t = x.number && y ? y->t : x.t;
  KILN_CHECK(is_fp(t), "codegen: {} needs a float operand", name);
  std::string fn = t == CT::F32 ? std::string(name) + "f" : name;
  std::string args = x.as(t) + (y ? ", " + y->as(t) : "");
  return def(t, fmt::format("{}({})", fn, args));
}

std::pair<Emitter*, CT> meet(const Val& a, const Val& b) {
  if (!a.number) return {a.e, a.t};
  return {b.e, b.t};
}

// a op b; integers in their unsigned type, where the wrap is defined.
Val arith(const Val& a, const Val& b, char op, double folded) {
  if (a.number && b.number) return Val(folded);
  auto [e, t] = meet(a, b);
  if (is_fp(t)) return e->def(t, fmt::format("{} {} {}", a.as(t), op, b.as(t)));
  const char* u = t == CT::I64 ? "unsigned long long" : "unsigned";
  return e->def(t, fmt::format("({})(({}){} {} ({}){})", cname(t), u, a.as(t), op, u, b.as(t)));
}
Val operator+(const Val& a, const Val& b) { return arith(a, b, '+', a.c + b.c); }
Val operator-(const Val& a, const Val& b) { return arith(a, b, '-', a.c - b.c); }
Val operator*(const Val& a, const Val& b) { return arith(a, b, '*', a.c * b.c); }
Val operator/(const Val& a, const Val& b) {
  if (a.number && b.number) return Val(a.c / b.c);
  auto [e, t] = meet(a, b);
  KILN_CHECK(is_fp(t), "codegen: integer division is not a pointwise op");
  return e->def(t, fmt::format("{} / {}", a.as(t), b.as(t)));
}
Val operator-(const Val& a) {
  if (a.number) return Val(-a.c);
  if (is_fp(a.t)) return a.e->def(a.t, "-" + a.x);
  const char* u = a.t == CT::I64 ? "unsigned long long" : "unsigned";
  return a.e->def(a.t, fmt::format("({})(({})0 - ({}){})", cname(a.t), u, u, a.x));
}

Mask compare(const Val& a, const Val& b, const char* op) {
  KILN_CHECK(!(a.number && b.number), "codegen: a comparison of two numbers");
  auto [e, t] = meet(a, b);
  return e->mask(fmt::format("{} {} {}", a.as(t), op, b.as(t)));  // C's != is true for NaN
}
Mask operator==(const Val& a, const Val& b) { return compare(a, b, "=="); }
Mask operator!=(const Val& a, const Val& b) { return compare(a, b, "!="); }
Mask operator<(const Val& a, const Val& b) { return compare(a, b, "<"); }
Mask operator<=(const Val& a, const Val& b) { return compare(a, b, "<="); }
Mask operator>(const Val& a, const Val& b) { return compare(a, b, ">"); }
Mask operator>=(const Val& a, const Val& b) { return compare(a, b, ">="); }
Mask operator&(const Mask& a, const Mask& b) { return a.e->mask(fmt::format("{} && {}", a.x, b.x)); }
Mask operator|(const Mask& a, const Mask& b) { return a.e->mask(fmt::format("{} || {}", a.x, b.x)); }
Val select(const Mask& m, const Val& a, const Val& b) {
  KILN_CHECK(!(a.number && b.number), "codegen: a select between two numbers");
  auto [e, t] = meet(a, b);
  return e->def(t, fmt::format("{} ? {} : {}", m.x, a.as(t), b.as(t)));
}

#define KILN_CUDA_MATH(X) X(exp) X(log) X(log1p) X(expm1) X(sqrt) X(sin) X(cos) X(tanh) X(erf)
#define KILN_DEFINE(fn) \
  Val fn(const Val& x) { return x.e->math(#fn, x); }
KILN_CUDA_MATH(KILN_DEFINE)
#undef KILN_DEFINE
#undef KILN_CUDA_MATH
Val pow(const Val& x, const Val& y) { return (x.number ? y.e : x.e)->math("pow", x, &y); }
// Integers are already whole numbers.
Val floor(const Val& x) { return is_fp(x.t) ? x.e->math("floor", x) : x; }
Val ceil(const Val& x) { return is_fp(x.t) ? x.e->math("ceil", x) : x; }
Val rint(const Val& x) { return is_fp(x.t) ? x.e->math("rint", x) : x; }
Val fabs(const Val& x) {
  if (is_fp(x.t)) return x.e->math("fabs", x);
  if (x.t == CT::U8) return x;  // unsigned
  return select(x < Val(0), -x, x);
}

Val pointwise(Emitter& e, OpId op, const std::vector<Val>& a) { return lower::apply_pointwise(e, op, a); }

}  // namespace kiln::codegen::cuda_emit
