// codegen/cuda/emit.cpp -- lowers a fused group to CUDA C (the design is in emit.h).
//
// Values are C temporaries, one per step, in the types registers hold: float for f32, f16 and
// bf16 (rounded to the 16-bit type after each op, as eagerly), double, int, long long, and
// unsigned char for u8 and bool (0 or 1). Integer arithmetic wraps (it is done in unsigned
// types, where C++ defines the wrap); float arithmetic is IEEE without fast math; float to
// integer conversion truncates and saturates with NaN giving 0 (runtime/dtype.h's CastKind).
#include "codegen/cuda/emit.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "ir/fusion.h"
#include "ir/graph.h"
#include "runtime/check.h"
#include "runtime/ops/formulas.h"

namespace kiln::codegen {
namespace {

// Indices a thread handles per turn of a strided loop, their loads issued together.
constexpr int kUnroll = 4;

enum class CT : uint8_t { F32, F64, I32, I64, U8 };
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
    case DType::F32: case DType::F16: case DType::BF16: return CT::F32;
    case DType::F64: return CT::F64;
    case DType::I32: return CT::I32;
    case DType::I64: return CT::I64;
    case DType::U8: case DType::Bool: return CT::U8;
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

struct Emitter;

// The scalar algebra the formulas run on: a C temporary (or literal) of type t, or a number not
// yet typed (T(0.5) in a formula), typed by the operand it meets.
struct Val {
  Emitter* e = nullptr;
  std::string x;
  CT t = CT::F64;
  bool number = false;
  double c = 0;
  Val() = default;
  Val(double v) : number(true), c(v) {}  // NOLINT: formulas write T(1)
  Val(Emitter* em, std::string expr, CT ty) : e(em), x(std::move(expr)), t(ty) {}
  std::string as(CT ty) const { return number ? literal(c, ty) : x; }
};
struct Mask {
  Emitter* e = nullptr;
  std::string x;
};

struct Emitter {
  std::string text;
  int next = 0;
  int indent = 1;

  void line(const std::string& s) { text += std::string(2 * indent, ' ') + s + "\n"; }
  std::string temp() { return fmt::format("v{}", next++); }
  Val def(CT t, const std::string& expr) {
    std::string r = temp();
    line(fmt::format("{} {} = {};", cname(t), r, expr));
    return Val(this, r, t);
  }
  Mask mask(const std::string& expr) {
    std::string r = temp();
    line(fmt::format("bool {} = {};", r, expr));
    return Mask{this, r};
  }
  Val bool_of(const Mask& m) { return def(CT::U8, fmt::format("(unsigned char)({} ? 1 : 0)", m.x)); }

  // Between register types, as runtime/dtype.h's CastKind says for the dtypes they hold.
  Val convert(const Val& v, CT from, CT to) {
    if (v.number) return Val(v.c);
    if (from == to) return v;
    if (is_fp(from) && !is_fp(to)) {  // toward zero, saturating, NaN to 0
      const char* fn = to == CT::U8 ? "kiln_f2u8" : to == CT::I32 ? "kiln_f2i32" : "kiln_f2i64";
      return def(to, fmt::format("{}((double){})", fn, v.x));
    }
    return def(to, fmt::format("({}){}", cname(to), v.x));  // C's conversions: IEEE, or modular
  }
  Val cast(const Val& v, DType from, DType to) {
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
  Val round_to(const Val& x, DType t) {
    std::string f = x.number ? literal(x.c, CT::F32) : x.x;
    return t == DType::F16 ? def(CT::F32, fmt::format("kiln_h2f(kiln_f2h({}))", f))
                           : def(CT::F32, fmt::format("kiln_bf2f(kiln_f2bf({}))", f));
  }
  Val math(const char* name, const Val& x, const Val* y = nullptr) {
    CT t = x.number && y ? y->t : x.t;
    KILN_CHECK(is_fp(t), "codegen: {} needs a float operand", name);
    std::string fn = t == CT::F32 ? std::string(name) + "f" : name;
    std::string args = x.as(t) + (y ? ", " + y->as(t) : "");
    return def(t, fmt::format("{}({})", fn, args));
  }
};

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

// Helpers every kernel's text starts with. On a device they use the hardware's conversions
// (IEEE round to nearest even, as runtime/half.h does on the CPU); the host emulation header
// defines the first group itself.
const char* kPrelude = R"(// kiln CUDA kernel
#ifndef KILN_HOST_CUDA
template <typename T> __device__ __forceinline__ T* kiln_shared() {
  extern __shared__ __align__(16) unsigned char kiln_smem[];
  return reinterpret_cast<T*>(kiln_smem);
}
__device__ __forceinline__ float kiln_f32(unsigned b) { return __uint_as_float(b); }
__device__ __forceinline__ double kiln_f64(unsigned long long b) { return __longlong_as_double((long long)b); }
__device__ __forceinline__ unsigned short kiln_f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float kiln_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short kiln_f2bf(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float kiln_bf2f(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
#endif
__device__ __forceinline__ long long kiln_f2i64(double x) {
  return x != x ? 0 : x >= 9223372036854775808.0 ? 9223372036854775807LL : x < -9223372036854775808.0 ? (-9223372036854775807LL - 1) : (long long)x;
}
__device__ __forceinline__ int kiln_f2i32(double x) {
  return x != x ? 0 : x >= 2147483648.0 ? 2147483647 : x < -2147483648.0 ? (-2147483647 - 1) : (int)x;
}
__device__ __forceinline__ unsigned char kiln_f2u8(double x) {
  return x != x ? 0 : x >= 255.0 ? 255 : x <= 0.0 ? 0 : (unsigned char)x;
}
)";

// The layout a kernel's text depends on: with generic_strides, no input broadcasts and no
// operand has a known unit stride (outputs keep the bits that mark them reduced).
KernelLayout text_layout(const KernelLayout& l, const CudaEmitOptions& o) {
  KernelLayout t = l;
  if (!o.generic_strides) return t;
  for (OperandLayout& x : t.inputs) x.broadcast = 0, x.unit_inner = false;
  for (OperandLayout& x : t.outputs) x.unit_inner = false;
  return t;
}

struct KernelEmitter {
  const ir::Graph& body;
  const KernelLayout L;
  CudaEmitOptions options;
  Emitter e;
  size_t n_in, n_out;
  std::vector<int> producer, input_index, level;
  std::map<std::pair<size_t, int>, int> imm_index;  // (node, slot) -> a.imm index
  std::map<uint32_t, Val> acc;                      // reduction result -> its accumulator
  std::map<uint32_t, size_t> stash;                 // as the LLVM emitter's (see there)
  bool final_pass = false;
  struct Reduction {
    uint32_t value;
    OpId op;
    DType acc;
  };

  KernelEmitter(const ir::Graph& b, const KernelLayout& l, const CudaEmitOptions& o)
      : body(b), L(text_layout(l, o)), options(o), n_in(b.inputs.size()), n_out(b.outputs.size()) {
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
    if (options.immediates_as_args)
      for (const CudaImmediate& m : cuda_immediates(b)) imm_index[{m.node, m.slot}] = static_cast<int>(imm_index.size());
  }

  bool is_reduction(uint32_t v) const {
    int p = producer[v];
    return p >= 0 && body.nodes[p].kind == ir::NodeKind::Op && ir::fusible_reduction(body.nodes[p].op);
  }
  const OperandLayout& operand(size_t k) const { return k < n_in ? L.inputs[k] : L.outputs[k - n_in]; }
  DType operand_dtype(size_t k) const { return body.type(k < n_in ? body.inputs[k] : body.outputs[k - n_in]).dtype; }
  bool full_output(size_t o) const { return operand(n_in + o).broadcast == 0 || L.reduced == 0; }

  // Operand k's element at loop index idx: "((T*)a.data[k])[offset]".
  std::string element(size_t k, const std::vector<std::string>& idx) {
    const OperandLayout& o = operand(k);
    std::string off;
    for (int d = 0; d < L.rank; ++d) {
      if (o.broadcast >> d & 1 || idx[d] == "0") continue;
      bool unit = d == L.rank - 1 && o.unit_inner;
      std::string term = unit ? idx[d] : fmt::format("{} * a.stride[{}]", idx[d], k * L.rank + d);
      off += (off.empty() ? "" : " + ") + term;
    }
    return fmt::format("(({}*)a.data[{}])[{}]", mem_name(operand_dtype(k)), k, off.empty() ? "0" : off);
  }
  Val load(size_t k, const std::vector<std::string>& idx) {
    DType dt = operand_dtype(k);
    std::string el = element(k, idx);
    if (dt == DType::F16) return e.def(CT::F32, fmt::format("kiln_h2f({})", el));
    if (dt == DType::BF16) return e.def(CT::F32, fmt::format("kiln_bf2f({})", el));
    return e.def(ct_of(dt), el);
  }
  void store(size_t out, const Val& v, const std::vector<std::string>& idx) {
    DType dt = body.type(body.outputs[out]).dtype;
    std::string el = element(n_in + out, idx);
    if (is_half(dt)) {  // the float holds a value of dt already: its bits, exactly
      std::string f = v.number ? literal(v.c, CT::F32) : v.x;
      e.line(fmt::format("{} = {}({});", el, dt == DType::F16 ? "kiln_f2h" : "kiln_f2bf", f));
      return;
    }
    e.line(fmt::format("{} = {};", el, v.as(ct_of(dt))));
  }

  Val immediate(size_t node, int slot, DType cd) {
    const ir::Node& n = body.nodes[node];
    if (!options.immediates_as_args) return Val(&e, literal(n.attrs.imm[slot], cd), ct_of(cd));
    int k = imm_index.at({node, slot});
    if (is_float(cd)) return e.convert(e.def(CT::F64, fmt::format("kiln_f64((unsigned long long)a.imm[{}])", k)), CT::F64, ct_of(cd));
    return e.convert(e.def(CT::I64, fmt::format("a.imm[{}]", k)), CT::I64, ct_of(cd));
  }

  // Value v at loop index idx; memo holds what this loop body computed already.
  Val value(uint32_t v, const std::vector<std::string>& idx, std::map<uint32_t, Val>& memo) {
    if (auto it = memo.find(v); it != memo.end()) return it->second;
    Val r;
    DType dt = body.type(v).dtype;
    auto stashed = final_pass ? stash.find(v) : stash.end();
    if (stashed != stash.end()) {
      r = load(n_in + stashed->second, idx);
    } else if (input_index[v] >= 0) {
      r = load(static_cast<size_t>(input_index[v]), idx);
    } else {
      size_t ni = static_cast<size_t>(producer.at(v));
      const ir::Node& n = body.nodes.at(ni);
      if (n.kind == ir::NodeKind::Const) {
        std::string c = is_float(dt) ? literal(n.constant.to(DType::F64).item<double>(), ct_of(dt))
                                     : int_literal(n.constant.to(DType::I64).item<int64_t>(), ct_of(dt));
        r = Val(&e, c, ct_of(dt));
      } else if (ir::fusible_reduction(n.op)) {
        auto a = acc.find(v);
        KILN_CHECK(a != acc.end(), "codegen: reduction %{} used before its pass", v);
        r = e.cast(a->second, accumulator_dtype(body.type(n.inputs[0]).dtype), dt);
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
            args.push_back(immediate(ni, k, cd));
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
        throw Error(fmt::format("codegen: {} cannot be part of a CUDA kernel", op_name(n.op)));
      }
    }
    memo[v] = r;
    return r;
  }

  // The input of a last-level reduction that a full output is computed from is stored into
  // that output while the pass reduces it, and read back by the final pass.
  void plan_stash(const std::vector<Reduction>& reds, int max_level) {
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
  bool reads(uint32_t from, uint32_t v) const {
    if (from == v) return true;
    int p = producer[from];
    if (p < 0 || is_reduction(from)) return false;
    for (uint32_t u : body.nodes[static_cast<size_t>(p)].inputs)
      if (reads(u, v)) return true;
    return false;
  }

  // Coordinates of `dims` from the linear index `linear` (the last dim varies fastest).
  void coords(const std::vector<int>& dims, const std::string& linear, std::vector<std::string>& idx) {
    if (dims.empty()) return;
    if (dims.size() == 1) {
      idx[dims[0]] = linear;
      return;
    }
    std::string r = e.temp();
    e.line(fmt::format("long long {} = {};", r, linear));
    for (size_t k = dims.size(); k-- > 1;) {
      int d = dims[k];
      std::string c = e.temp();
      e.line(fmt::format("long long {0} = {1} % a.size[{2}]; {1} /= a.size[{2}];", c, r, d));
      idx[d] = c;
    }
    idx[dims[0]] = r;
  }
  std::string count(const std::vector<int>& dims) {
    std::string p;
    for (int d : dims) p += (p.empty() ? "" : " * ") + fmt::format("a.size[{}]", d);
    return p.empty() ? "1LL" : p;
  }

  std::string identity(OpId op, DType t) {
    Scalar v = reduction_identity(op_def(op).combine, t);
    return is_float(t) ? literal(v.to_double(), ct_of(t)) : int_literal(v.to_int(), ct_of(t));
  }
  // a combined with x, as the eager kernels combine (max and min: NaN wins).
  std::string combine(OpId op, DType t, const std::string& a, const std::string& x) {
    CT ct = ct_of(t);
    switch (op_def(op).combine) {
      case Combine::Sum:
        return is_fp(ct) ? fmt::format("{} + {}", a, x)
                         : fmt::format("(long long)((unsigned long long){} + (unsigned long long){})", a, x);
      case Combine::Prod:
        return is_fp(ct) ? fmt::format("{} * {}", a, x)
                         : fmt::format("(long long)((unsigned long long){} * (unsigned long long){})", a, x);
      case Combine::Max: return fmt::format("({0} > {1} || {0} != {0}) ? {0} : {1}", a, x);
      case Combine::Min: return fmt::format("({0} < {1} || {0} != {0}) ? {0} : {1}", a, x);
      case Combine::None: break;
    }
    throw InternalError(fmt::format("codegen: {} is not a combining reduction", op_name(op)));
  }

  // Combines register `r` across the block; every thread ends with the block's result.
  void block_reduce(const Reduction& red, const std::string& r) {
    const char* t = cname(ct_of(red.acc));
    std::string s = e.temp();
    e.line(fmt::format("for (int m = 16; m > 0; m /= 2) {{ {0} o = __shfl_xor_sync(0xffffffffu, {1}, m); {1} = {2}; }}",
                       t, r, combine(red.op, red.acc, r, "o")));
    e.line(fmt::format("{}* {} = kiln_shared<{}>();", t, s, t));
    e.line(fmt::format("if (threadIdx.x % 32 == 0) {}[threadIdx.x / 32] = {};", s, r));
    e.line("__syncthreads();");
    e.line("if (threadIdx.x < 32) {");
    ++e.indent;
    e.line(fmt::format("{0} w = threadIdx.x < blockDim.x / 32 ? {1}[threadIdx.x] : {2};", t, s, identity(red.op, red.acc)));
    e.line(fmt::format("for (int m = 16; m > 0; m /= 2) {{ {0} o = __shfl_xor_sync(0xffffffffu, w, m); w = {1}; }}", t,
                       combine(red.op, red.acc, "w", "o")));
    e.line(fmt::format("if (threadIdx.x == 0) {}[0] = w;", s));
    --e.indent;
    e.line("}");
    e.line("__syncthreads();");
    e.line(fmt::format("{} = {}[0];", r, s));
    e.line("__syncthreads();  // the slot is reused");
  }

  // The outputs computed at one loop index (before any is stored).
  struct Computed {
    std::vector<std::string> idx;
    std::vector<std::pair<size_t, Val>> out;  // (output, value)
  };
  // Every output (with full_only: the full-size ones) at the index whose `dims` coordinates
  // come from linear index `i`, the other coordinates as in `base`.
  Computed outputs_at(const std::vector<int>& dims, const std::string& i, const std::vector<std::string>& base,
                      bool full_only = false) {
    Computed c{base, {}};
    coords(dims, i, c.idx);
    std::map<uint32_t, Val> memo;
    for (size_t o = 0; o < n_out; ++o)
      if (!full_only || full_output(o)) c.out.emplace_back(o, value(body.outputs[o], c.idx, memo));
    return c;
  }
  void store_all(const Computed& c) {
    for (const auto& [o, v] : c.out) store(o, v, c.idx);
  }

  // A strided loop, `for (i = start; i < limit; i += step)`, unrolled kUnroll times: each turn
  // runs `load` for kUnroll indices first, then `use` on each result in index order, so the
  // loads of a turn are in flight together (stores come after every load: the compiler may not
  // move a load above a store that could alias it). A remainder loop finishes. `load` gets the
  // index's name and returns what `use` takes.
  template <class Load, class Use>
  void unrolled_loop(const std::string& start, const std::string& limit, const std::string& step, Load load, Use use) {
    std::string i0 = e.temp();
    e.line(fmt::format("long long {} = {};", i0, start));
    e.line(fmt::format("for (; {0} + {1} * ({2}) < {3}; {0} += {4} * ({2})) {{", i0, kUnroll - 1, step, limit, kUnroll));
    ++e.indent;
    std::vector<decltype(load(std::string()))> turn;
    for (int k = 0; k < kUnroll; ++k) {
      std::string ik = e.temp();
      e.line(fmt::format("const long long {} = {} + {} * ({});", ik, i0, k, step));
      turn.push_back(load(ik));
    }
    for (auto& t : turn) use(t);
    --e.indent;
    e.line("}");
    e.line(fmt::format("for (; {0} < {1}; {0} += {2}) {{", i0, limit, step));
    ++e.indent;
    auto t = load(i0);
    use(t);
    --e.indent;
    e.line("}");
  }

  std::string run(const std::string& symbol) {
    size_t n_ops = n_in + n_out;
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
    if (!reds.empty()) plan_stash(reds, max_level);

    e.indent = 1;
    if (reds.empty()) {
      e.line(fmt::format("const long long total = {};", count(all)));
      e.line("const long long step = (long long)gridDim.x * blockDim.x;");
      unrolled_loop("(long long)blockIdx.x * blockDim.x + threadIdx.x", "total", "step",
                    [&](const std::string& i) { return outputs_at(all, i, idx); },
                    [&](const Computed& c) { store_all(c); });
    } else {
      KILN_CHECK(!kept.empty() || L.rank >= 1, "codegen: a reduction kernel needs a loop");
      e.line(fmt::format("const long long rows = {}, cols = {};", count(kept), count(reduced)));
      e.line("for (long long row = blockIdx.x; row < rows; row += gridDim.x) {");
      ++e.indent;
      coords(kept, "row", idx);
      for (int lv = 1; lv <= max_level; ++lv) {
        for (const Reduction& r : reds) {
          if (level[r.value] != lv) continue;
          std::string a = e.temp();
          e.line(fmt::format("{} {} = {};", cname(ct_of(r.acc)), a, identity(r.op, r.acc)));
          acc[r.value] = Val(&e, a, ct_of(r.acc));
        }
        // Per reduced index: each reduction's input (cast to its accumulator), then the stashes
        // and the combines, in index order (each thread's order, so the bits do not change).
        struct Inputs {
          std::vector<std::string> jx;
          std::vector<std::pair<const Reduction*, Val>> in;  // per reduction of this level
        };
        unrolled_loop(
            "threadIdx.x", "cols", "blockDim.x",
            [&](const std::string& j) {
              Inputs t{idx, {}};
              coords(reduced, j, t.jx);
              std::map<uint32_t, Val> memo;
              for (const Reduction& r : reds)
                if (level[r.value] == lv) t.in.emplace_back(&r, value(body.nodes[producer[r.value]].inputs[0], t.jx, memo));
              return t;
            },
            [&](const Inputs& t) {
              for (const auto& [r, in] : t.in) {
                uint32_t u = body.nodes[producer[r->value]].inputs[0];
                if (auto st = stash.find(u); st != stash.end() && lv == max_level) store(st->second, in, t.jx);
                Val x = e.cast(in, body.type(u).dtype, r->acc);
                const std::string& a = acc[r->value].x;
                e.line(fmt::format("{} = {};", a, combine(r->op, r->acc, a, x.as(ct_of(r->acc)))));
              }
            });
        for (const Reduction& r : reds)
          if (level[r.value] == lv) block_reduce(r, acc[r.value].x);
        std::map<uint32_t, Val> done;  // reduced outputs this level completed
        bool any = false;
        for (size_t o = 0; o < n_out; ++o) any = any || (!full_output(o) && level[body.outputs[o]] == lv);
        if (any) {
          e.line("if (threadIdx.x == 0) {");
          ++e.indent;
          for (size_t o = 0; o < n_out; ++o)
            if (!full_output(o) && level[body.outputs[o]] == lv) store(o, value(body.outputs[o], idx, done), idx);
          --e.indent;
          e.line("}");
        }
      }
      bool any_full = false;
      for (size_t o = 0; o < n_out; ++o) any_full = any_full || full_output(o);
      if (any_full) {
        final_pass = true;
        unrolled_loop("threadIdx.x", "cols", "blockDim.x",
                      [&](const std::string& j) { return outputs_at(reduced, j, idx, /*full_only=*/true); },
                      [&](const Computed& c) { store_all(c); });
        final_pass = false;
      }
      --e.indent;
      e.line("}");
    }

    std::string out = kPrelude;
    out += fmt::format("\n// {} inputs, {} outputs, rank {}, reduced dims {:#x}\n", n_in, n_out, L.rank, L.reduced);
    out += "struct Args {\n";
    out += fmt::format("  long long size[{}];\n", L.rank);
    out += fmt::format("  long long stride[{}];\n", n_ops * L.rank);
    out += fmt::format("  void* data[{}];\n", n_ops);
    if (!imm_index.empty()) out += fmt::format("  long long imm[{}];\n", imm_index.size());
    out += "};\n\n";
    out += fmt::format("extern \"C\" __global__ __launch_bounds__({}) void {}(const Args a) {{\n", kCudaBlock, symbol);
    out += e.text;
    out += "}\n";
    return out;
  }
};

}  // namespace

std::string cuda_prelude() { return kPrelude; }

std::vector<CudaImmediate> cuda_immediates(const ir::Graph& body) {
  std::vector<CudaImmediate> out;
  for (size_t i = 0; i < body.nodes.size(); ++i) {
    const ir::Node& n = body.nodes[i];
    if (n.kind != ir::NodeKind::Op || op_family(n.op) != OpFamily::Pointwise) continue;
    for (int k = 0; k < op_arity(n.op); ++k)
      if (input_of_slot(n.attrs.imm_mask, k) < 0) out.push_back({i, k, is_float(n.attrs.dtype)});
  }
  return out;
}

std::string emit_cuda(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol,
                      const CudaEmitOptions& options) {
  KernelEmitter k(body, layout, options);
  return k.run(symbol);
}

std::vector<uint64_t> pack_cuda_args(const KernelLayout& layout, const std::vector<int64_t>& sizes,
                                     const std::vector<int64_t>& strides, const std::vector<void*>& data,
                                     const std::vector<uint64_t>& immediates) {
  size_t n_ops = layout.inputs.size() + layout.outputs.size();
  KILN_CHECK(sizes.size() == static_cast<size_t>(layout.rank) && strides.size() == n_ops * layout.rank &&
                 data.size() == n_ops,
             "codegen: kernel arguments do not fit the layout");
  std::vector<uint64_t> words;
  for (int64_t s : sizes) words.push_back(static_cast<uint64_t>(s));
  for (int64_t s : strides) words.push_back(static_cast<uint64_t>(s));
  for (void* p : data) words.push_back(reinterpret_cast<uint64_t>(p));
  words.insert(words.end(), immediates.begin(), immediates.end());
  return words;
}

}  // namespace kiln::codegen
