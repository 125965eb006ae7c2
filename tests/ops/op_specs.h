// tests/ops/op_specs.h -- the reference of every op in ops.def, in double precision: one
// Spec<OpId::X> per op. The generated suite (tests/every_op) instantiates Spec for every line
// of ops.def, so an op listed there without a Spec here fails to build.
//
// A pointwise op's Spec is its scalar reference and the domain its operands are drawn from;
// the suite makes the shapes, broadcasts, views and dtypes. Any other op's Spec lists the
// dtypes it accepts and builds its own cases: inputs, the call, and the reference on the
// inputs' values.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/collective.h"
#include "tests/distributed/solo_group.h"
#include "tests/ops/reduce_reference.h"
#include "tests/ops/reference.h"

namespace kiln::test {

template <OpId id> struct Spec;  // defined below for every op; never generically

// ---- pointwise ops: a scalar reference on the domain the operands are drawn from ----------
struct Domain {
  double lo, hi;
  bool whole = false;      // whole numbers only: comparisons meet ties, relu_grad's y meets 0
  bool condition = false;  // a bool operand whatever the dtype under test (where's condition)
};

#define KILN_UNARY_SPEC(Name, lo_, hi_, ...)                 \
  template <> struct Spec<OpId::Name> {                      \
    static constexpr Domain domain[1] = {{lo_, hi_}};        \
    static double ref(double x) { return __VA_ARGS__; }      \
  };
#define KILN_BINARY_SPEC(Name, lo_, hi_, lo_b, hi_b, whole_, ...)              \
  template <> struct Spec<OpId::Name> {                                       \
    static constexpr Domain domain[2] = {{lo_, hi_, whole_}, {lo_b, hi_b, whole_}}; \
    static double ref(double a, double b) { return __VA_ARGS__; } \
  };

inline const double kSqrt2 = std::sqrt(2.0);
inline const double kPi = std::acos(-1.0);

KILN_UNARY_SPEC(Neg, -10, 10, -x)
KILN_UNARY_SPEC(Abs, -10, 10, std::fabs(x))
KILN_UNARY_SPEC(Sign, -10, 10, x > 0 ? 1.0 : x < 0 ? -1.0 : x)  // NaN and +-0 stay
KILN_UNARY_SPEC(Exp, -10, 10, std::exp(x))
KILN_UNARY_SPEC(Log, 0.01, 100, std::log(x))
KILN_UNARY_SPEC(Log1p, -0.99, 10, std::log1p(x))
KILN_UNARY_SPEC(Expm1, -5, 5, std::expm1(x))
KILN_UNARY_SPEC(Sqrt, 0, 100, std::sqrt(x))
KILN_UNARY_SPEC(Rsqrt, 0.01, 100, 1 / std::sqrt(x))
KILN_UNARY_SPEC(Reciprocal, -10, 10, 1 / x)
KILN_UNARY_SPEC(Sin, -10, 10, std::sin(x))
KILN_UNARY_SPEC(Cos, -10, 10, std::cos(x))
KILN_UNARY_SPEC(Tanh, -5, 5, std::tanh(x))
KILN_UNARY_SPEC(Erf, -3, 3, std::erf(x))
KILN_UNARY_SPEC(Sigmoid, -10, 10, 1 / (1 + std::exp(-x)))
KILN_UNARY_SPEC(Relu, -10, 10, std::isnan(x) ? x : std::max(x, 0.0))
KILN_UNARY_SPEC(Gelu, -6, 6, 0.5 * x * (1 + std::erf(x / kSqrt2)))
KILN_UNARY_SPEC(GeluTanh, -6, 6, 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x))))
KILN_UNARY_SPEC(Silu, -10, 10, x / (1 + std::exp(-x)))
KILN_UNARY_SPEC(Floor, -10, 10, std::floor(x))
KILN_UNARY_SPEC(Ceil, -10, 10, std::ceil(x))
KILN_UNARY_SPEC(Round, -10, 10, std::nearbyint(x))  // default rounding: half to even
KILN_UNARY_SPEC(LogicalNot, -2, 2, x == 0 ? 1.0 : 0.0)

KILN_BINARY_SPEC(Add, -10, 10, -10, 10, false, a + b)
KILN_BINARY_SPEC(Sub, -10, 10, -10, 10, false, a - b)
KILN_BINARY_SPEC(Mul, -10, 10, -10, 10, false, a * b)
KILN_BINARY_SPEC(Div, -10, 10, -10, 10, false, a / b)
KILN_BINARY_SPEC(Pow, 0.1, 4, -3, 3, false, std::pow(a, b))
KILN_BINARY_SPEC(Maximum, -10, 10, -10, 10, false, std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b))
KILN_BINARY_SPEC(Minimum, -10, 10, -10, 10, false, std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b))
KILN_BINARY_SPEC(Eq, -3, 3, -3, 3, true, double(a == b))
KILN_BINARY_SPEC(Ne, -3, 3, -3, 3, true, double(a != b))
KILN_BINARY_SPEC(Lt, -3, 3, -3, 3, true, double(a < b))
KILN_BINARY_SPEC(Le, -3, 3, -3, 3, true, double(a <= b))
KILN_BINARY_SPEC(Gt, -3, 3, -3, 3, true, double(a > b))
KILN_BINARY_SPEC(Ge, -3, 3, -3, 3, true, double(a >= b))
KILN_BINARY_SPEC(LogicalAnd, -2, 2, -2, 2, true, double(a != 0 && b != 0))
KILN_BINARY_SPEC(LogicalOr, -2, 2, -2, 2, true, double(a != 0 || b != 0))
#undef KILN_UNARY_SPEC
#undef KILN_BINARY_SPEC

// relu_grad(y, g): y whole, so that it meets 0.
template <> struct Spec<OpId::ReluGrad> {
  static constexpr Domain domain[2] = {{-3, 3, true}, {-10, 10}};
  static double ref(double y, double g) { return y > 0 ? g : 0.0; }
};
template <> struct Spec<OpId::Where> {
  static constexpr Domain domain[3] = {{0, 1, true, true}, {-10, 10}, {-10, 10}};
  static double ref(double c, double a, double b) { return c != 0 ? a : b; }
};
// min(max(x, lo), hi): hi wins when lo > hi; NaN in x stays NaN.
template <> struct Spec<OpId::Clamp> {
  static constexpr Domain domain[3] = {{-10, 10}, {-6, 2}, {-2, 6}};
  static double ref(double x, double lo, double hi) {
    if (std::isnan(x)) return x;
    double t = x < lo ? lo : x;
    return t > hi ? hi : t;
  }
};

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
  std::function<Tensor(std::span<const Tensor>)> run;    // the op, through the public API
  std::function<Ref(std::span<const Ref>)> reference;   // the same on the inputs' values
};

/// Values of dtype t in [lo, hi] (u8 and bool clip lo at 0), made in `shape`.
inline Tensor values(const Dims& shape, DType t, double lo = -3, double hi = 3, bool whole = false) {
  if (t == DType::U8 || t == DType::Bool) lo = std::max(lo, 0.0);
  return uniform(shape, t, lo, hi, whole);
}
/// A transposed view of a fresh [b, a] tensor: shape [a, b], not contiguous.
inline Tensor transposed(int64_t a, int64_t b, DType t, double lo = -3, double hi = 3,
                         bool whole = false) {
  return values({b, a}, t, lo, hi, whole).t();
}
/// Indices in [0, n) as i64.
inline Tensor indices(const Dims& shape, int64_t n) { return randint(0, n, shape, DType::I64); }

inline const std::vector<DType> kNumericDTypes = {f32, f64, f16, bf16, i32, i64, u8};

// ---- conversion -----------------------------------------------------------------------------
/// What eager's cast gives for the value v of a `from` tensor stored as `to` (dtype.h CastKind):
/// floats to integers go toward zero and saturate (NaN gives 0); integers narrow by dropping high
/// bits; anything to bool is "nonzero"; to floats, the nearest value (the tolerance's business).
inline double cast_ref(double v, DType from, DType to) {
  if (to == DType::Bool) return v != 0 ? 1.0 : 0.0;
  if (is_float(to)) return stored_as(to, v);
  if (!is_float(from)) return stored_as(to, v);  // integers wrap; only u8 is narrower here
  if (std::isnan(v)) return 0;
  double t = std::trunc(v);
  double lo = to == DType::U8 ? 0 : to == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = to == DType::U8 ? 255 : to == DType::I32 ? 2147483647.0 : 9223372036854775807.0;
  return std::clamp(t, lo, hi);
}
template <> struct Spec<OpId::Cast> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (DType to : kAllDTypes) {
      auto ref = [t, to](std::span<const Ref> r) {
        Ref o = r[0];
        for (double& x : o.v) x = cast_ref(x, t, to);
        return o;
      };
      auto run = [to](std::span<const Tensor> in) { return cast(in[0], to); };
      out.push_back({"to_" + std::string(dtype_name(to)), {values({4, 9}, t, -300, 300)}, run, ref});
      out.push_back({"view_to_" + std::string(dtype_name(to)), {transposed(5, 3, t, -2.5, 2.5)}, run, ref});
    }
    return out;
  }
};

// ---- reductions -------------------------------------------------------------------------------
/// A reduction over `axes` of x, through `run`, against `combine` of each group (scale: the sum
/// of |terms|, for sums).
inline Case reduction_case(std::string name, Tensor x, Dims axes, bool keepdim,
                           std::function<Tensor(const Tensor&, const Dims&, bool)> run,
                           double (*combine)(const std::vector<double>&), bool with_scale) {
  return {std::move(name), {std::move(x)},
          [=](std::span<const Tensor> in) { return run(in[0], axes, keepdim); },
          [=](std::span<const Ref> r) {
            Reduction red = reduction(r[0].shape, axes, keepdim);
            Ref o{red.out_shape, reduce_ref(r[0].v, red, combine), {}};
            if (with_scale) o.scale = reduce_ref(r[0].v, red, ref_abs_sum);
            return o;
          }};
}
inline std::vector<Case> reduction_cases(DType t, double lo, double hi,
                                         std::function<Tensor(const Tensor&, const Dims&, bool)> run,
                                         double (*combine)(const std::vector<double>&), bool with_scale) {
  // (The expanded dim is kept, so that no group holds copies of one value: ties, where max's
  // derivative jumps, would fail the gradient check.)
  return {reduction_case("axis1", values({3, 4, 5}, t, lo, hi), {1}, false, run, combine, with_scale),
          reduction_case("axes02_keepdim", values({3, 4, 5}, t, lo, hi), {0, -1}, true, run, combine, with_scale),
          reduction_case("all", values({6, 7}, t, lo, hi), {}, false, run, combine, with_scale),
          reduction_case("permuted", values({4, 3, 5}, t, lo, hi).permute({2, 0, 1}), {0}, false, run, combine, with_scale),
          reduction_case("expanded", values({3, 1, 5}, t, lo, hi).expand({3, 4, 5}), {0, 2}, false, run, combine, with_scale)};
}
template <> struct Spec<OpId::Sum> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return reduction_cases(t, -3, 3, [](const Tensor& x, const Dims& a, bool k) { return sum(x, a, k); }, ref_sum, true);
  }
};
template <> struct Spec<OpId::Prod> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {  // integers in {-1, 0, 1}: no overflow
    return reduction_cases(t, -1.5, 1.5, [](const Tensor& x, const Dims& a, bool k) { return prod(x, a, k); }, ref_prod, false);
  }
};
template <> struct Spec<OpId::MaxReduce> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return reduction_cases(t, -3, 3, [](const Tensor& x, const Dims& a, bool k) { return amax(x, a, k); }, ref_max, false);
  }
};
template <> struct Spec<OpId::MinReduce> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return reduction_cases(t, -3, 3, [](const Tensor& x, const Dims& a, bool k) { return amin(x, a, k); }, ref_min, false);
  }
};
/// argmax / argmin along one dim: the first extreme (ties are common with whole numbers).
inline std::vector<Case> arg_cases(DType t, bool largest) {
  auto run = [largest](const Tensor& x, const Dims& a, bool k) {
    if (a.empty()) return largest ? argmax(x) : argmin(x);
    return largest ? argmax(x, a[0], k) : argmin(x, a[0], k);
  };
  auto ref = [largest](Dims axes, bool keepdim) {
    return [=](std::span<const Ref> r) {
      Reduction red = reduction(r[0].shape, axes, keepdim);
      Ref o{red.out_shape, {}, {}};
      for (size_t g = 0; g < red.groups.size(); ++g) {
        std::vector<double> vals;
        for (int64_t i : red.groups[g]) vals.push_back(r[0].v[static_cast<size_t>(i)]);
        o.v.push_back(double(red.positions[g][ref_arg(vals, largest)]));
      }
      return o;
    };
  };
  std::vector<Case> out;
  auto add = [&](std::string name, Tensor x, Dims axes, bool keepdim) {
    out.push_back({std::move(name), {x}, [=](std::span<const Tensor> in) { return run(in[0], axes, keepdim); },
                   ref(axes, keepdim)});
  };
  add("dim1", values({3, 4, 5}, t, -3, 3, true), {1}, false);
  add("last_keepdim", values({3, 4, 5}, t, -3, 3), {-1}, true);
  add("flattened", values({5, 6}, t, -3, 3), {}, false);
  add("transposed", transposed(6, 4, t, -3, 3, true), {0}, false);
  return out;
}
template <> struct Spec<OpId::Argmax> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) { return arg_cases(t, true); }
};
template <> struct Spec<OpId::Argmin> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) { return arg_cases(t, false); }
};

// ---- scans and orderings along one dim ------------------------------------------------------
/// Calls fn(index of the row's first element, its elements' indices) for each row of `shape`
/// along dim.
template <class F> void for_each_row_along(const Dims& shape, int64_t dim, F fn) {
  Dims starts = shape;
  starts[static_cast<size_t>(dim)] = shape[static_cast<size_t>(dim)] > 0 ? 1 : 0;
  for_each_index(starts, [&](const Dims& s) {
    std::vector<Dims> row;
    for (int64_t i = 0; i < shape[static_cast<size_t>(dim)]; ++i) {
      Dims at = s;
      at[static_cast<size_t>(dim)] = i;
      row.push_back(at);
    }
    fn(s, row);
  });
}
/// Running sums along dim (from its end when reverse), with each sum's terms' size as scale.
inline Ref cumsum_ref(const Ref& r, int64_t dim, bool reverse) {
  Ref o = zeros_ref(r.shape);
  o.scale = o.v;
  for_each_row_along(r.shape, dim, [&](const Dims&, std::vector<Dims> row) {
    if (reverse) std::reverse(row.begin(), row.end());
    double acc = 0, size = 0;
    for (const Dims& at : row) {
      acc += r.at(at);
      size += std::abs(r.at(at));
      o.at(at) = acc;
      o.scale[static_cast<size_t>(o.offset(at))] = size;
    }
  });
  return o;
}
/// The first k positions along dim of each row's stable order, NaN above every number.
inline Ref order_ref(const Ref& r, int64_t dim, bool descending, int64_t k) {
  Dims shape = r.shape;
  shape[static_cast<size_t>(dim)] = k;
  Ref o = zeros_ref(shape);
  for_each_row_along(r.shape, dim, [&](const Dims& s, const std::vector<Dims>& row) {
    std::vector<int64_t> idx(row.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    auto key = [&](int64_t i) { return r.at(row[static_cast<size_t>(i)]); };
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t i, int64_t j) {
      double a = key(i), b = key(j);
      if (std::isnan(a) || std::isnan(b)) return descending ? std::isnan(a) && !std::isnan(b) : std::isnan(b) && !std::isnan(a);
      return descending ? a > b : a < b;
    });
    for (int64_t p = 0; p < k; ++p) {
      Dims at = s;
      at[static_cast<size_t>(dim)] = p;
      o.at(at) = static_cast<double>(idx[static_cast<size_t>(p)]);
    }
  });
  return o;
}
/// Float values with NaNs among them (and ties), for the orderings.
inline Tensor with_nans(const Dims& shape, DType t) {
  Tensor x = values(shape, t, -3, 3, true);
  if (!is_float(t)) return x;
  Tensor nan_at = lt(rand(shape, DType::F64), 0.2);
  return where(nan_at, std::numeric_limits<double>::quiet_NaN(), x.to(DType::F64)).to(t);
}
template <> struct Spec<OpId::Cumsum> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto reversed = [](std::span<const Tensor> in) {
      Attrs a;
      a.dim = 0;
      a.reverse = true;
      return apply(OpId::Cumsum, {in[0]}, a);
    };
    return {{"dim1", {values({3, 7, 4}, t)}, [](std::span<const Tensor> in) { return cumsum(in[0], 1); },
             [](std::span<const Ref> r) { return cumsum_ref(r[0], 1, false); }},
            {"last_view", {transposed(5, 6, t)}, [](std::span<const Tensor> in) { return cumsum(in[0], -1); },
             [](std::span<const Ref> r) { return cumsum_ref(r[0], 1, false); }},
            {"reverse", {transposed(6, 3, t)}, reversed, [](std::span<const Ref> r) { return cumsum_ref(r[0], 0, true); }}};
  }
};
template <> struct Spec<OpId::Argsort> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"last_ties_nans", {with_nans({4, 9}, t)}, [](std::span<const Tensor> in) { return argsort(in[0]); },
             [](std::span<const Ref> r) { return order_ref(r[0], 1, false, 9); }},
            {"dim0_descending_view", {transposed(7, 3, t, -3, 3, true)},
             [](std::span<const Tensor> in) { return argsort(in[0], 0, true); },
             [](std::span<const Ref> r) { return order_ref(r[0], 0, true, 7); }}};
  }
};
template <> struct Spec<OpId::TopkIndices> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"largest3_ties_nans", {with_nans({5, 8}, t)},
             [](std::span<const Tensor> in) { return std::get<1>(topk(in[0], 3)); },
             [](std::span<const Ref> r) { return order_ref(r[0], 1, true, 3); }},
            {"smallest2_dim0_view", {transposed(6, 4, t)},
             [](std::span<const Tensor> in) { return std::get<1>(topk(in[0], 2, 0, false)); },
             [](std::span<const Ref> r) { return order_ref(r[0], 0, false, 2); }}};
  }
};

// iota: 0..n-1 on the device of the case's one tensor (which only says where), directly and
// through arange's start and step. It has no operand whose dtype it could refuse: every dtype's
// cases give i64 positions.
template <> struct Spec<OpId::Iota> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto positions = [](int64_t start, int64_t n, int64_t step) {
      return [=](std::span<const Ref>) {
        Ref o = zeros_ref({n});
        for (int64_t i = 0; i < n; ++i) o.v[size_t(i)] = double(start + i * step);
        return o;
      };
    };
    auto direct = [&](std::string name, int64_t n) {
      return Case{std::move(name), {zeros({1}, t)},
                  [n](std::span<const Tensor> in) {
                    Attrs a;
                    a.shape = {n};
                    a.device = in[0].device();
                    return apply(OpId::Iota, {}, a);
                  },
                  positions(0, n, 1)};
    };
    return {direct("empty", 0), direct("seven", 7), direct("past_a_block", 70001),
            {"arange_start_step", {zeros({1}, t)},
             [](std::span<const Tensor> in) { return arange(20, 3, -4).to(in[0].device()); }, positions(20, 5, -4)}};
  }
};

// numel: a size as a number, on the host (moved to the case tensor's device, where a 0-d CPU
// tensor would meet it anyway); every dtype but bool.
template <> struct Spec<OpId::Numel> {
  static std::vector<DType> dtypes() {
    std::vector<DType> d;
    for (DType t : kAllDTypes)
      if (t != DType::Bool) d.push_back(t);
    return d;
  }
  static std::vector<Case> cases(DType t) {
    auto make = [t](std::string name, Dims shape) {
      double n = 1;
      for (int64_t d : shape) n *= double(d);
      return Case{std::move(name), {zeros({1}, t)},
                  [shape, t](std::span<const Tensor> in) {
                    Attrs a;
                    a.shape = shape;
                    a.dtype = t;
                    return apply(OpId::Numel, {}, a).to(in[0].device());
                  },
                  [n](std::span<const Ref>) { return Ref{{}, {n}, {}}; }};
    };
    return {make("product", {3, 4, 5}), make("empty", {2, 0}), make("scalar", {})};
  }
};

// ---- views ----------------------------------------------------------------------------------
/// out[idx] = in[source(idx)] over out_shape: the reference of every op that only moves values.
template <class F> Ref gather_ref(const Ref& in, const Dims& out_shape, F source) {
  Ref o = zeros_ref(out_shape);
  for_each_index(out_shape, [&](const Dims& idx) { o.at(idx) = in.at(source(idx)); });
  return o;
}
template <> struct Spec<OpId::Reshape> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](Dims shape) {
      return [shape](std::span<const Ref> r) { return Ref{shape, r[0].v, {}}; };
    };
    return {{"contiguous", {values({4, 6}, t)}, [](std::span<const Tensor> in) { return in[0].reshape({2, -1, 3}); }, ref({2, 4, 3})},
            {"transposed", {transposed(4, 6, t)}, [](std::span<const Tensor> in) { return in[0].reshape({-1}); }, ref({24})}};
  }
};
template <> struct Spec<OpId::Permute> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"rank3", {values({2, 3, 4}, t)}, [](std::span<const Tensor> in) { return in[0].permute({2, 0, 1}); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {4, 2, 3}, [](const Dims& i) { return Dims{i[1], i[2], i[0]}; });
             }},
            {"of_a_slice", {values({3, 8}, t).slice(1, 1, 8, 3)}, [](std::span<const Tensor> in) { return in[0].permute({1, 0}); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {r[0].shape[1], r[0].shape[0]}, [](const Dims& i) { return Dims{i[1], i[0]}; });
             }}};
  }
};
template <> struct Spec<OpId::Slice> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"step2", {values({3, 9}, t)}, [](std::span<const Tensor> in) { return in[0].slice(1, 1, 8, 2); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {3, 4}, [](const Dims& i) { return Dims{i[0], 1 + 2 * i[1]}; });
             }},
            {"of_a_transpose", {transposed(6, 4, t)}, [](std::span<const Tensor> in) { return in[0].slice(0, 2, 5); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {3, 4}, [](const Dims& i) { return Dims{i[0] + 2, i[1]}; });
             }}};
  }
};
template <> struct Spec<OpId::Expand> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"new_and_size1_dims", {values({3, 1, 4}, t)}, [](std::span<const Tensor> in) { return in[0].expand({2, 3, 5, 4}); },
             [](std::span<const Ref> r) { return Ref{{2, 3, 5, 4}, broadcast_values(r[0].v, r[0].shape, {2, 3, 5, 4}), {}}; }}};
  }
};

// ---- copies and data movement -----------------------------------------------------------------
inline Ref same_values(std::span<const Ref> r) { return Ref{r[0].shape, r[0].v, {}}; }
template <> struct Spec<OpId::Copy> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"transposed", {transposed(5, 7, t)}, [](std::span<const Tensor> in) { return in[0].clone(); }, same_values},
            {"expanded", {values({4, 1}, t).expand({4, 6})}, [](std::span<const Tensor> in) { return in[0].contiguous(); }, same_values}};
  }
};
template <> struct Spec<OpId::ToDevice> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto run = [](std::span<const Tensor> in) {
      Attrs a;
      a.device = cpu;
      return apply(OpId::ToDevice, {in[0]}, a);
    };
    return {{"cpu_to_cpu", {values({3, 5}, t)}, run, same_values}, {"view", {transposed(4, 3, t)}, run, same_values}};
  }
};
template <> struct Spec<OpId::Cat> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](int64_t dim) {
      return [dim](std::span<const Ref> r) {
        Dims shape = r[0].shape;
        shape[dim] = 0;
        for (const Ref& x : r) shape[dim] += x.shape[dim];
        Ref o = zeros_ref(shape);
        int64_t base = 0;
        for (const Ref& x : r) {
          for_each_index(x.shape, [&](const Dims& i) {
            Dims j = i;
            j[dim] += base;
            o.at(j) = x.at(i);
          });
          base += x.shape[dim];
        }
        return o;
      };
    };
    return {{"dim1_with_views", {values({2, 3}, t), transposed(2, 1, t), values({2, 8}, t).slice(1, 0, 8, 2)},
             [](std::span<const Tensor> in) { return cat({in[0], in[1], in[2]}, 1); }, ref(1)},
            {"dim0", {values({1, 4}, t), values({3, 4}, t)}, [](std::span<const Tensor> in) { return cat({in[0], in[1]}, 0); }, ref(0)}};
  }
};
template <> struct Spec<OpId::Gather> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"dim1", {transposed(4, 5, t), indices({4, 3}, 5)},
             [](std::span<const Tensor> in) { return gather(in[0], 1, in[1]); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], r[1].shape, [&](const Dims& i) { return Dims{i[0], int64_t(r[1].at(i))}; });
             }},
            {"dim0", {values({5, 3}, t), indices({2, 3}, 5)},
             [](std::span<const Tensor> in) { return gather(in[0], 0, in[1]); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], r[1].shape, [&](const Dims& i) { return Dims{int64_t(r[1].at(i)), i[1]}; });
             }}};
  }
};
template <> struct Spec<OpId::IndexSelect> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"dim0_repeats", {values({5, 4}, t), indices({7}, 5)},
             [](std::span<const Tensor> in) { return index_select(in[0], 0, in[1]); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {7, 4}, [&](const Dims& i) { return Dims{int64_t(r[1].v[size_t(i[0])]), i[1]}; });
             }},
            {"dim1_view", {transposed(3, 6, t), indices({4}, 6)},
             [](std::span<const Tensor> in) { return index_select(in[0], 1, in[1]); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {3, 4}, [&](const Dims& i) { return Dims{i[0], int64_t(r[1].v[size_t(i[1])])}; });
             }}};
  }
};
template <> struct Spec<OpId::ScatterAdd> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](std::span<const Ref> r) {
      Ref o = r[0];
      for_each_index(r[1].shape, [&](const Dims& i) { o.at({i[0], int64_t(r[1].at(i))}) += r[2].at(i); });
      return o;
    };
    return {{"dim1_repeats", {values({4, 5}, t), indices({4, 6}, 5), values({4, 6}, t)},
             [](std::span<const Tensor> in) { return scatter_add(in[0], 1, in[1], in[2]); }, ref},
            {"views", {transposed(4, 5, t), indices({4, 2}, 5), transposed(4, 2, t)},
             [](std::span<const Tensor> in) { return scatter_add(in[0], 1, in[1], in[2]); }, ref}};
  }
};
template <> struct Spec<OpId::IndexAdd> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](std::span<const Ref> r) {
      Ref o = r[0];
      for_each_index(r[2].shape, [&](const Dims& i) { o.at({int64_t(r[1].v[size_t(i[0])]), i[1]}) += r[2].at(i); });
      return o;
    };
    return {{"dim0_repeats", {values({5, 4}, t), indices({7}, 5), values({7, 4}, t)},
             [](std::span<const Tensor> in) { return index_add(in[0], 0, in[1], in[2]); }, ref},
            {"views", {transposed(5, 3, t), indices({2}, 5), transposed(2, 3, t)},
             [](std::span<const Tensor> in) { return index_add(in[0], 0, in[1], in[2]); }, ref}};
  }
};
template <> struct Spec<OpId::Pad> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    // pads: (before, after) of the last dim, then of the one before.
    auto ref = [](Dims pads, double value) {
      return [=](std::span<const Ref> r) {
        Dims shape = r[0].shape;
        size_t rank = shape.size();
        for (size_t k = 0; 2 * k < pads.size(); ++k) shape[rank - 1 - k] += pads[2 * k] + pads[2 * k + 1];
        Ref o = zeros_ref(shape);
        for (double& v : o.v) v = value;
        for_each_index(r[0].shape, [&](const Dims& i) {
          Dims j = i;
          for (size_t k = 0; 2 * k < pads.size(); ++k) j[rank - 1 - k] += pads[2 * k];
          o.at(j) = r[0].at(i);
        });
        return o;
      };
    };
    return {{"two_dims", {values({3, 4}, t)}, [](std::span<const Tensor> in) { return pad(in[0], {1, 2, 2, 0}, 1); }, ref({1, 2, 2, 0}, 1)},
            {"last_dim_of_a_view", {transposed(3, 5, t)}, [](std::span<const Tensor> in) { return pad(in[0], {0, 3}); }, ref({0, 3}, 0)}};
  }
};

// ---- loop-shaped compute ----------------------------------------------------------------------
/// NumPy matmul of a [..., m, k] and b [k, n] (or 1-d operands), with each output's sum of
/// |terms| as its scale.
inline Ref matmul_ref(const Ref& a, const Ref& b) {
  bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  int64_t k = b1 ? b.shape[0] : b.shape[b.shape.size() - 2];
  int64_t n = b1 ? 1 : b.shape.back();
  int64_t m = a1 ? 1 : a.shape[a.shape.size() - 2];
  int64_t batch = a1 ? 1 : a.numel() / (m * k);
  Dims shape;
  if (!a1)
    for (size_t d = 0; d + 1 < a.shape.size(); ++d) shape.push_back(a.shape[d]);
  if (!b1) shape.push_back(n);
  Ref o{shape, {}, {}};
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t q = 0; q < k; ++q) {
          double t = a.v[size_t((p * m + i) * k + q)] * b.v[size_t(q * n + j)];
          s += t, mag += std::abs(t);
        }
        o.v.push_back(s), o.scale.push_back(mag);
      }
  return o;
}
template <> struct Spec<OpId::Matmul> {
  static std::vector<DType> dtypes() { return kNumericDTypes; }
  static std::vector<Case> cases(DType t) {
    auto run = [](std::span<const Tensor> in) { return matmul(in[0], in[1]); };
    auto ref = [](std::span<const Ref> r) { return matmul_ref(r[0], r[1]); };
    return {{"batched", {values({2, 3, 4}, t), values({4, 5}, t)}, run, ref},
            {"views", {transposed(3, 6, t), transposed(6, 2, t)}, run, ref},
            {"vector_matrix", {values({4}, t), values({4, 3}, t)}, run, ref},
            {"matrix_vector", {values({3, 4}, t), values({4}, t)}, run, ref}};
  }
};

/// addmm, addmm_relu, addmm_gelu_tanh (bias [n], a [m,k], b [k,n]): the matmul's reference,
/// plus the bias, through the activation (relu and gelu_tanh stretch errors by at most 1.13).
template <OpId Id> struct AddmmSpec {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    auto run = [](std::span<const Tensor> in) { return apply(Id, {in[0], in[1], in[2]}); };
    auto ref = [](std::span<const Ref> r) {
      Ref o = matmul_ref(r[1], r[2]);
      int64_t n = r[0].shape[0];
      for (size_t i = 0; i < o.v.size(); ++i) {
        double bias = r[0].v[i % static_cast<size_t>(n)], z = o.v[i] + bias;
        o.scale[i] = 1.13 * (o.scale[i] + std::abs(bias));
        if (Id == OpId::AddmmRelu) z = z < 0 ? 0 : z;
        if (Id == OpId::AddmmGeluTanh) z = 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
        o.v[i] = z;
      }
      return o;
    };
    return {{"rows", {values({5}, t), values({3, 4}, t), values({4, 5}, t)}, run, ref},
            {"views", {values({2}, t), transposed(3, 6, t), transposed(6, 2, t)}, run, ref}};
  }
};
template <> struct Spec<OpId::Addmm> : AddmmSpec<OpId::Addmm> {};
template <> struct Spec<OpId::AddmmRelu> : AddmmSpec<OpId::AddmmRelu> {};
template <> struct Spec<OpId::AddmmGeluTanh> : AddmmSpec<OpId::AddmmGeluTanh> {};

/// A 2-d convolution's geometry: every (output, input, weight) triple of taps it sums.
struct ConvGeometry {
  Dims x, w, stride, padding, dilation;
  int64_t groups;
  Dims out() const {
    auto len = [&](int d) { return (x[2 + d] + 2 * padding[d] - dilation[d] * (w[2 + d] - 1) - 1) / stride[d] + 1; };
    return {x[0], w[0], len(0), len(1)};
  }
  Attrs attrs() const {
    Attrs a;
    a.stride = stride, a.padding = padding, a.dilation = dilation, a.groups = groups;
    return a;
  }
  // fn(out index, x index, w index) for every tap inside the input.
  template <class F> void taps(F fn) const {
    int64_t cin = w[1], cout_g = w[0] / groups;
    for_each_index(out(), [&](const Dims& o) {
      int64_t g = o[1] / cout_g;
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t kh = 0; kh < w[2]; ++kh)
          for (int64_t kw = 0; kw < w[3]; ++kw) {
            int64_t ih = o[2] * stride[0] - padding[0] + kh * dilation[0];
            int64_t iw = o[3] * stride[1] - padding[1] + kw * dilation[1];
            if (ih < 0 || ih >= x[2] || iw < 0 || iw >= x[3]) continue;
            fn(o, Dims{o[0], g * cin + c, ih, iw}, Dims{o[1], c, kh, kw});
          }
    });
  }
};
inline const ConvGeometry kConv{{2, 4, 6, 7}, {6, 2, 3, 3}, {2, 1}, {1, 2}, {1, 2}, 2};
inline const ConvGeometry kConvPlain{{1, 3, 5, 5}, {2, 3, 2, 2}, {1, 1}, {0, 0}, {1, 1}, 1};

/// conv2d(x, w) and its two gradients, each as `sum over taps of a product`, with scales.
template <class Pick> Ref conv_sum(const Dims& shape, const ConvGeometry& g, Pick pick) {
  Ref o = zeros_ref(shape);
  o.scale.assign(o.v.size(), 0.0);
  g.taps([&](const Dims& oi, const Dims& xi, const Dims& wi) {
    auto [at, term] = pick(oi, xi, wi);
    int64_t off = o.offset(at);
    o.v[size_t(off)] += term, o.scale[size_t(off)] += std::abs(term);
  });
  return o;
}
/// conv2d and its two gradients, each a sum over the taps: operands (x, w), (g, w) and (x, g),
/// and where each tap's product goes.
enum class ConvPart { Output, InputGrad, WeightGrad };
inline std::vector<Case> conv_cases(OpId id, ConvPart part, DType t) {
  std::vector<Case> out;
  for (const ConvGeometry* g : {&kConv, &kConvPlain}) {
    Dims a = part == ConvPart::InputGrad ? g->out() : g->x;
    Dims b = part == ConvPart::WeightGrad ? g->out() : g->w;
    Dims result = part == ConvPart::Output ? g->out() : part == ConvPart::InputGrad ? g->x : g->w;
    auto run = [id, part, g, result](std::span<const Tensor> in) {
      Attrs at = g->attrs();
      if (part != ConvPart::Output) at.shape = result;
      return apply(id, {in[0], in[1]}, at);
    };
    auto ref = [part, g, result](std::span<const Ref> r) {
      return conv_sum(result, *g, [&](const Dims& o, const Dims& x, const Dims& w) {
        switch (part) {
          case ConvPart::Output: return std::pair{o, r[0].at(x) * r[1].at(w)};
          case ConvPart::InputGrad: return std::pair{x, r[0].at(o) * r[1].at(w)};
          case ConvPart::WeightGrad: break;
        }
        return std::pair{w, r[0].at(x) * r[1].at(o)};
      });
    };
    std::string name = g == &kConv ? "strided_padded_dilated_grouped" : "plain";
    out.push_back({name, {values(a, t), values(b, t)}, run, ref});
    // A channels-last view of the first operand.
    Dims nhwc{a[0], a[2], a[3], a[1]};
    out.push_back({name + "_channels_last", {values(nhwc, t).permute({0, 3, 1, 2}), values(b, t)}, run, ref});
  }
  return out;
}
template <> struct Spec<OpId::Conv2d> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return conv_cases(OpId::Conv2d, ConvPart::Output, t); }
};
template <> struct Spec<OpId::Conv2dInputGrad> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return conv_cases(OpId::Conv2dInputGrad, ConvPart::InputGrad, t); }
};
template <> struct Spec<OpId::Conv2dWeightGrad> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return conv_cases(OpId::Conv2dWeightGrad, ConvPart::WeightGrad, t); }
};

// ---- pools: windows over the last two dims of [N, C, H, W] -------------------------------------
struct PoolGeometry {
  Dims x, kernel, stride, padding;
  bool ceil_mode = false, count_include_pad = true;
  int64_t len(int d) const {
    int64_t n = x[2 + d] + 2 * padding[d] - kernel[d], s = stride[d];
    int64_t out = (ceil_mode ? (n + s - 1) / s : n / s) + 1;
    if (ceil_mode && (out - 1) * s >= x[2 + d] + padding[d]) --out;  // the last window starts inside
    return out;
  }
  Dims out() const { return {x[0], x[1], len(0), len(1)}; }
  Attrs attrs() const {
    Attrs a;
    a.kernel = kernel, a.stride = stride, a.padding = padding;
    a.ceil_mode = ceil_mode, a.count_include_pad = count_include_pad;
    return a;
  }
  // fn(out index, the window's input cells in row-major order, the average's divisor).
  template <class F> void windows(F fn) const {
    for_each_index(out(), [&](const Dims& o) {
      int64_t h0 = o[2] * stride[0] - padding[0], w0 = o[3] * stride[1] - padding[1];
      int64_t h1 = std::min(h0 + kernel[0], x[2] + padding[0]), w1 = std::min(w0 + kernel[1], x[3] + padding[1]);
      int64_t padded = (h1 - h0) * (w1 - w0);
      std::vector<Dims> cells;
      for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h1, x[2]); ++h)
        for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w1, x[3]); ++w) cells.push_back({o[0], o[1], h, w});
      fn(o, cells, double(count_include_pad ? padded : int64_t(cells.size())));
    });
  }
};
inline const PoolGeometry kMaxPool{{2, 3, 7, 8}, {3, 2}, {2, 2}, {1, 1}, true, true};
inline const PoolGeometry kAvgPools[] = {{{2, 3, 7, 8}, {3, 2}, {2, 1}, {1, 1}, false, true},
                                         {{1, 2, 5, 6}, {2, 3}, {2, 2}, {1, 1}, false, false}};

/// The cell max_pool2d picks in each window: the first largest, or the first NaN.
inline Dims max_cell(const Ref& x, const std::vector<Dims>& cells) {
  std::vector<double> vals;
  for (const Dims& c : cells) vals.push_back(x.at(c));
  return cells[ref_arg(vals, true)];
}
template <> struct Spec<OpId::MaxPool2d> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    const PoolGeometry g = kMaxPool;  // a copy: the lambdas keep it
    auto ref = [g](std::span<const Ref> r) {
      Ref o = zeros_ref(g.out());
      g.windows([&](const Dims& oi, const std::vector<Dims>& cells, double) { o.at(oi) = r[0].at(max_cell(r[0], cells)); });
      return o;
    };
    return {{"ceil_mode", {values(g.x, t)}, [g](std::span<const Tensor> in) { return max_pool2d(in[0], g.kernel, g.stride, g.padding, g.ceil_mode); }, ref},
            {"channels_last_view", {values({2, 7, 8, 3}, t).permute({0, 3, 1, 2})},
             [g](std::span<const Tensor> in) { return max_pool2d(in[0], g.kernel, g.stride, g.padding, g.ceil_mode); }, ref}};
  }
};
template <> struct Spec<OpId::MaxPool2dIndices> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    const PoolGeometry g = kMaxPool;  // a copy: the lambdas keep it
    return {{"ceil_mode_with_ties", {values(g.x, t, -3, 3, true)},
             [g](std::span<const Tensor> in) { return apply(OpId::MaxPool2dIndices, {in[0]}, g.attrs()); },
             [g](std::span<const Ref> r) {
               Ref o = zeros_ref(g.out());
               g.windows([&](const Dims& oi, const std::vector<Dims>& cells, double) {
                 Dims c = max_cell(r[0], cells);
                 o.at(oi) = double(c[2] * g.x[3] + c[3]);
               });
               return o;
             }}};
  }
};
template <> struct Spec<OpId::MaxPool2dBackward> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    const PoolGeometry g = kMaxPool;  // a copy: the lambdas keep it
    return {{"ceil_mode", {values(g.x, t), values(g.out(), t)},
             [g](std::span<const Tensor> in) { return apply(OpId::MaxPool2dBackward, {in[0], in[1]}, g.attrs()); },
             [g](std::span<const Ref> r) {
               Ref o = zeros_ref(g.x);
               g.windows([&](const Dims& oi, const std::vector<Dims>& cells, double) { o.at(max_cell(r[0], cells)) += r[1].at(oi); });
               return o;
             }}};
  }
};
template <> struct Spec<OpId::AvgPool2d> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (const PoolGeometry& g : kAvgPools) {
      out.push_back({g.count_include_pad ? "count_include_pad" : "count_exclude_pad", {values(g.x, t)},
                     [&g](std::span<const Tensor> in) {
                       return avg_pool2d(in[0], g.kernel, g.stride, g.padding, g.count_include_pad);
                     },
                     [&g](std::span<const Ref> r) {
                       Ref o = zeros_ref(g.out());
                       g.windows([&](const Dims& oi, const std::vector<Dims>& cells, double div) {
                         for (const Dims& c : cells) o.at(oi) += r[0].at(c) / div;
                       });
                       return o;
                     }});
    }
    return out;
  }
};
template <> struct Spec<OpId::AvgPool2dBackward> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (const PoolGeometry& g : kAvgPools) {
      out.push_back({g.count_include_pad ? "count_include_pad" : "count_exclude_pad", {values(g.out(), t)},
                     [&g](std::span<const Tensor> in) {
                       Attrs a = g.attrs();
                       a.shape = g.x;
                       return apply(OpId::AvgPool2dBackward, {in[0]}, a);
                     },
                     [&g](std::span<const Ref> r) {
                       Ref o = zeros_ref(g.x);
                       g.windows([&](const Dims& oi, const std::vector<Dims>& cells, double div) {
                         for (const Dims& c : cells) o.at(c) += r[0].at(oi) / div;
                       });
                       return o;
                     }});
    }
    return out;
  }
};

// ---- random draws: Philox 4x32-10 written out here, checked against Random123's known answer --
inline std::array<uint32_t, 4> philox_ref(uint64_t key, uint64_t counter) {
  uint32_t c[4] = {uint32_t(counter), uint32_t(counter >> 32), 0, 0};
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    uint32_t n[4] = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1, uint32_t(p0)};
    std::copy(n, n + 4, c);
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return {c[0], c[1], c[2], c[3]};
}
/// Draw i of rand (dtype t) or randn from state (seed, first counter), as runtime/random.cpp
/// documents the stream: rand keeps the top significand bits of one word (f64: 53 bits of
/// two), randn is Box-Muller on one counter's words.
inline double draw_ref(OpId id, DType t, uint64_t seed, uint64_t first, int64_t i) {
  if (id == OpId::Randn) {
    auto w = philox_ref(seed, first + uint64_t(i));
    double u1 = 1.0 - double(w[2]) * 0x1p-32;
    uint64_t bits = (uint64_t{w[0]} << 21) ^ (w[1] >> 11);
    double u2 = double(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  }
  if (t == DType::F64) {
    auto w = philox_ref(seed, first + uint64_t(i / 2));
    int j = int(i % 2);
    uint64_t bits = (uint64_t{w[2 * j]} << 21) ^ (w[2 * j + 1] >> 11);
    return double(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
  }
  int keep = t == DType::F32 ? 24 : t == DType::F16 ? 11 : 8;
  auto w = philox_ref(seed, first + uint64_t(i / 4));
  return std::ldexp(double(w[size_t(i % 4)] >> (32 - keep)), -keep);
}
inline std::vector<Case> draw_cases(OpId id, DType t) {
  auto make = [id, t](std::string name, Dims shape, int64_t seed, int64_t first) {
    return Case{std::move(name), {from_vector<int64_t>({seed, first}, {2})},
                [id, t, shape](std::span<const Tensor> in) {
                  Attrs a;
                  a.dtype = t, a.shape = shape;
                  return apply(id, {in[0]}, a);
                },
                [id, t, shape](std::span<const Ref> r) {
                  Ref o = zeros_ref(shape);
                  uint64_t seed = uint64_t(int64_t(r[0].v[0])), first = uint64_t(int64_t(r[0].v[1]));
                  for (int64_t i = 0; i < o.numel(); ++i) o.v[size_t(i)] = draw_ref(id, t, seed, first, i);
                  return o;
                }};
  };
  // A counter whose low word wraps inside the draw, and a draw that ends mid-counter.
  return {make("odd_size", {3, 7}, 1234, 17), make("low_word_wraps", {2, 1029}, 99, 0xfffffff0LL)};
}
template <> struct Spec<OpId::Rand> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return draw_cases(OpId::Rand, t); }
};
template <> struct Spec<OpId::Randn> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return draw_cases(OpId::Randn, t); }
};

// all_reduce over a group of this process alone: the reduction is the operand itself.
template <> struct Spec<OpId::AllReduce> {
  static std::vector<DType> dtypes() { return {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8}; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (Combine c : {Combine::Sum, Combine::Max, Combine::Min}) {
      auto run = [c](std::span<const Tensor> in) { return all_reduce_op(in[0], solo_group().id(), c); };
      auto ref = [](std::span<const Ref> r) { return r[0]; };
      std::string name(combine_name(c));
      out.push_back({name, {values({3, 5}, t)}, run, ref});
      out.push_back({name + "_transposed", {transposed(4, 3, t)}, run, ref});
    }
    return out;
  }
};

}  // namespace kiln::test
