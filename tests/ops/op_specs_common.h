// tests/ops/op_specs_common.h -- what every Spec (tests/ops/op_specs.h) is written with: the Spec
// template itself, the Ref values a reference reads and writes, the Case a non-pointwise Spec
// builds, and the makers of its input tensors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/ops/reference.h"

namespace kiln::test {

template <OpId id> struct Spec;  // defined for every op in op_specs_<family>.h; never generically

// The constants of the references: gelu and gelu_tanh (pointwise), randn (creation).
inline const double kSqrt2 = std::sqrt(2.0);
inline const double kPi = std::acos(-1.0);

// ---- every other op: its dtypes and cases ---------------------------------------------------
/// Row-major values in double: what a reference reads and writes.
struct Ref {
  Dims shape;
  std::vector<double> v;
  std::vector<double> scale;  // per element, the size of the terms behind it (sums); may be empty
  int64_t numel() const { return shape.product(); }
  /// The row-major offset of a full index.
  int64_t offset(const Dims& idx) const {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o = o * shape[d] + idx[d];
    return o;
  }
  double& at(const Dims& idx) { return v[static_cast<size_t>(offset(idx))]; }
  double at(const Dims& idx) const { return v[static_cast<size_t>(offset(idx))]; }
};
inline Ref zeros_ref(const Dims& shape) {
  return {shape, std::vector<double>(static_cast<size_t>(shape.product()), 0.0), {}};
}
/// Calls fn(index) for every index of `shape`, in row-major order.
template <class F> void for_each_index(const Dims& shape, F fn) {
  Dims idx(shape.size(), 0);
  for (int64_t i = 0; i < shape.product(); ++i) {
    fn(static_cast<const Dims&>(idx));
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

struct Case {
  std::string name;
  std::vector<Tensor> inputs;
  std::function<Tensor(std::span<const Tensor>)> run;  // the op, through the public API
  std::function<Ref(std::span<const Ref>)> reference;  // the same on the inputs' values
};

/// Values of dtype t in [lo, hi] (u8 and bool clip lo at 0), made in `shape`.
inline Tensor values(const Dims& shape, DType t, double lo = -3, double hi = 3, bool whole = false) {
  if (t == DType::U8 || t == DType::Bool) lo = std::max(lo, 0.0);
  return uniform(shape, t, lo, hi, whole);
}
/// A transposed view of a fresh [b, a] tensor: shape [a, b], not contiguous.
inline Tensor transposed(int64_t a, int64_t b, DType t, double lo = -3, double hi = 3, bool whole = false) {
  return values({b, a}, t, lo, hi, whole).t();
}
/// Indices in [0, n) as i64.
inline Tensor indices(const Dims& shape, int64_t n) { return randint(0, n, shape, DType::I64); }

inline const std::vector<DType> kNumericDTypes = {f32, f64, f16, bf16, i32, i64, u8};

}  // namespace kiln::test
