// codegen/llvm/scalar.h -- private to codegen/llvm: the scalar algebra the LLVM emitter runs the
// formulas of runtime/ops/formulas.h on. A Val is an IR register (or literal) of a type Ty, or a
// number not yet typed; an Emitter appends the instructions to the kernel's text and collects
// the declarations and attribute groups they need. Types, literals, casts, f16/bf16 and the
// operators are in scalar.cpp; the math functions (SLEEF calls, intrinsics, the inline f32
// approximations) in math.cpp.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/llvm/emit.h"
#include "runtime/dtype.h"
#include "runtime/op.h"
#include "runtime/scalar.h"

namespace kiln::codegen::llvm_ir {

enum class Ty : uint8_t { F32, F64, I8, I16, I32, I64 };
const char* ll(Ty t);
bool is_fp(Ty t);
bool is_half(DType d);
Ty ty_of(DType d);
Ty mem_ty(DType d);
std::string int_literal(int64_t i, Ty t);
std::string literal(double v, Ty t);
std::string literal(const Scalar& v, DType t);

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

  std::string allocas;               // all in the entry block, where mem2reg promotes them
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

  // Casts and f16/bf16 (scalar.cpp).
  Val convert(const Val& v, Ty from, Ty to, bool from_unsigned);
  Val cast(const Val& v, DType from, DType to);
  Val bool_of(const Mask& m);
  Val half_bits(const Val& x, DType t);
  Val half_value(const Val& h, DType t);
  Val round_to(const Val& x, DType t);

  // Calls (math.cpp).
  Val math(const MathFn& f, const Val& x, const Val* y = nullptr);
  Val intrinsic(const char* name, const Val& x);
};

// The operators and select (scalar.cpp).
Val operator+(const Val& a, const Val& b);
Val operator-(const Val& a, const Val& b);
Val operator*(const Val& a, const Val& b);
Val operator/(const Val& a, const Val& b);
Val operator-(const Val& a);
Mask operator==(const Val& a, const Val& b);
Mask operator!=(const Val& a, const Val& b);
Mask operator<(const Val& a, const Val& b);
Mask operator<=(const Val& a, const Val& b);
Mask operator>(const Val& a, const Val& b);
Mask operator>=(const Val& a, const Val& b);
Mask operator&(const Mask& a, const Mask& b);
Mask operator|(const Mask& a, const Mask& b);
Val select(const Mask& m, const Val& a, const Val& b);

// Pointwise op `op` of arguments `a` by its formula (codegen/lower.h's apply_pointwise on this
// algebra, scalar.cpp).
Val pointwise(Emitter& e, OpId op, const std::vector<Val>& a);

// The math functions (math.cpp).
Val exp(const Val& x);
Val log(const Val& x);
Val log1p(const Val& x);
Val expm1(const Val& x);
Val sqrt(const Val& x);
Val sin(const Val& x);
Val cos(const Val& x);
Val tanh(const Val& x);
Val erf(const Val& x);
Val pow(const Val& x, const Val& y);
Val floor(const Val& x);
Val ceil(const Val& x);
Val rint(const Val& x);
Val fabs(const Val& x);

}  // namespace kiln::codegen::llvm_ir
