// tests/ops/op_specs_reductions.h -- the Specs of the reductions: sum, prod, amax, amin, argmax,
// argmin.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tests/ops/op_specs_common.h"
#include "tests/ops/reduce_reference.h"

namespace kiln::test {

// ---- reductions -------------------------------------------------------------------------------
/// A reduction over `axes` of x, through `run`, against `combine` of each group (scale: the sum
/// of |terms|, for sums).
inline Case reduction_case(std::string name, Tensor x, Dims axes, bool keepdim,
                           std::function<Tensor(const Tensor&, const Dims&, bool)> run,
                           double (*combine)(const std::vector<double>&), bool with_scale) {
  return {std::move(name),
          {std::move(x)},
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
  return {
      reduction_case("axis1", values({3, 4, 5}, t, lo, hi), {1}, false, run, combine, with_scale),
      reduction_case("axes02_keepdim", values({3, 4, 5}, t, lo, hi), {0, -1}, true, run, combine, with_scale),
      reduction_case("all", values({6, 7}, t, lo, hi), {}, false, run, combine, with_scale),
      reduction_case("permuted", values({4, 3, 5}, t, lo, hi).permute({2, 0, 1}), {0}, false, run, combine, with_scale),
      reduction_case("expanded", values({3, 1, 5}, t, lo, hi).expand({3, 4, 5}), {0, 2}, false, run, combine,
                     with_scale)};
}
template <> struct Spec<OpId::Sum> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return reduction_cases(
        t, -3, 3, [](const Tensor& x, const Dims& a, bool k) { return sum(x, a, k); }, ref_sum, true);
  }
};
template <> struct Spec<OpId::Prod> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {  // integers in {-1, 0, 1}: no overflow
    return reduction_cases(
        t, -1.5, 1.5, [](const Tensor& x, const Dims& a, bool k) { return prod(x, a, k); }, ref_prod, false);
  }
};
template <> struct Spec<OpId::MaxReduce> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return reduction_cases(
        t, -3, 3, [](const Tensor& x, const Dims& a, bool k) { return amax(x, a, k); }, ref_max, false);
  }
};
template <> struct Spec<OpId::MinReduce> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return reduction_cases(
        t, -3, 3, [](const Tensor& x, const Dims& a, bool k) { return amin(x, a, k); }, ref_min, false);
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
    out.push_back({std::move(name),
                   {x},
                   [=](std::span<const Tensor> in) { return run(in[0], axes, keepdim); },
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

}  // namespace kiln::test
