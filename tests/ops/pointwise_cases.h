// tests/ops/pointwise_cases.h -- every pointwise op with its double-precision reference and the
// input domain it is tested on; shared by the pointwise test files.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "tests/ops/op_specs.h"

namespace kiln::test {

struct UnaryCase {
  const char* name;
  OpId id;
  Tensor (*fn)(const Tensor&);
  double (*ref)(double);
  double lo, hi;  // inputs are drawn uniformly from [lo, hi]
};

struct BinaryCase {
  const char* name;
  OpId id;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  double lo, hi;       // first operand's domain
  double lo_b, hi_b;   // second operand's domain
  bool whole = false;  // whole numbers only, so comparisons meet ties
};

// gtest prints a failing case's parameter: its name, not its bytes.
inline void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }
inline void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

/// Every unary and binary pointwise op in ops.def, with its reference from op_specs.h.
template <OpId id> UnaryCase unary_case(const char* name, Tensor (*fn)(const Tensor&)) {
  using S = Spec<id>;
  return {name, id, fn, &S::ref, S::domain[0].lo, S::domain[0].hi};
}
template <OpId id> BinaryCase binary_case(const char* name, Tensor (*fn)(const Tensor&, const Tensor&)) {
  using S = Spec<id>;
  return {
      name, id, fn, &S::ref, S::domain[0].lo, S::domain[0].hi, S::domain[1].lo, S::domain[1].hi, S::domain[0].whole};
}
/// Both lists, filled in one pass over ops.def.
struct PointwiseCases {
  std::vector<UnaryCase> unary;
  std::vector<BinaryCase> binary;
};
inline const PointwiseCases& pointwise_cases() {
  static const PointwiseCases cases = [] {
    PointwiseCases c;
#define KILN_CASE_1(Name, name) \
  c.unary.push_back(unary_case<OpId::Name>(#name, [](const Tensor& x) { return name(x); }));
#define KILN_CASE_2(Name, name) \
  c.binary.push_back(binary_case<OpId::Name>(#name, [](const Tensor& a, const Tensor& b) { return name(a, b); }));
#define KILN_CASE_3(Name, name)  // where and clamp have tests of their own
#define KILN_CASE(Name, name, arity) KILN_CASE_##arity(Name, name)
#define OP(Name, name, arity, family) KILN_IF_POINTWISE_##family(KILN_CASE(Name, name, arity))
#include "runtime/ops.def"
#undef OP
#undef KILN_CASE
#undef KILN_CASE_1
#undef KILN_CASE_2
#undef KILN_CASE_3
    return c;
  }();
  return cases;
}
inline const std::vector<UnaryCase>& unary_cases() { return pointwise_cases().unary; }
inline const std::vector<BinaryCase>& binary_cases() { return pointwise_cases().binary; }

/// The dtype op `id` computes in for tensor operands of dtype t (PyTorch's rules: true
/// division and transcendental functions take integers and bool to f32).
inline DType compute_dtype(OpId id, DType t) { return op_def(id).promote == Promote::Float ? to_float_dtype(t) : t; }
/// Whether op `id` accepts tensor operands of dtype t.
inline bool accepts(OpId id, DType t) { return op_def(id).kinds & kind_bit(compute_dtype(id, t)); }
/// The result dtype of op `id` on operands of dtype t.
inline DType result_dtype(OpId id, DType t) {
  Promote p = op_def(id).promote;
  return p == Promote::Compare || p == Promote::Logical ? DType::Bool : compute_dtype(id, t);
}

/// The reference of a unary case on x, stored in the result dtype.
inline std::vector<double> unary_ref(const UnaryCase& c, const std::vector<double>& x, DType out) {
  return map(x, [&](double v) { return stored_as(out, c.ref(v)); });
}
inline std::vector<double> binary_ref(const BinaryCase& c, const std::vector<double>& a, const std::vector<double>& b,
                                      DType out) {
  return map(a, b, [&](double u, double v) { return stored_as(out, c.ref(u, v)); });
}

}  // namespace kiln::test
