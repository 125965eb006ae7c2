// codegen/cuda/emit_scalar.h -- private to codegen/cuda/emit*.cpp: the scalar algebra the CUDA
// emitter writes values in (C types, exact literals, the C temporaries of one kernel body) and
// the formulas of runtime/ops/formulas.h over it (emit_scalar.cpp has the rules).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/op.h"
#include "runtime/scalar.h"

namespace kiln::codegen::cuda_emit {

// The C types registers hold.
enum class CT : uint8_t { F32, F64, I32, I64, U8 };
const char* cname(CT t);
bool is_fp(CT t);
bool is_half(DType d);
CT ct_of(DType d);
// How a dtype is stored in memory.
const char* mem_name(DType d);

// An integer literal of type t (int and unsigned char keep the low bits, as the LLVM emitter).
std::string int_literal(int64_t i, CT t);
// An exact literal: floats in hexadecimal (non-finite ones through their bits).
std::string literal(double v, CT t);
std::string literal(const Scalar& v, DType t);

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

// One kernel body's text, written a line at a time, and its temporaries.
struct Emitter {
  std::string text;
  int next = 0;
  int indent = 1;

  void line(const std::string& s);
  std::string temp();
  Val def(CT t, const std::string& expr);
  Mask mask(const std::string& expr);
  Val bool_of(const Mask& m);

  Val convert(const Val& v, CT from, CT to);
  Val cast(const Val& v, DType from, DType to);
  Val round_to(const Val& x, DType t);
  Val math(const char* name, const Val& x, const Val* y = nullptr);
};

// Pointwise op `op` of arguments `a` (in its compute dtype's register type), by its formula.
Val pointwise(Emitter& e, OpId op, const std::vector<Val>& a);

}  // namespace kiln::codegen::cuda_emit
