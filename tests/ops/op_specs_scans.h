// tests/ops/op_specs_scans.h -- the Specs of the scans and orderings along one dim: cumsum,
// argsort, topk's indices.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tests/ops/op_specs_common.h"

namespace kiln::test {

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
      if (std::isnan(a) || std::isnan(b))
        return descending ? std::isnan(a) && !std::isnan(b) : std::isnan(b) && !std::isnan(a);
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
    return {
        {"dim1",
         {values({3, 7, 4}, t)},
         [](std::span<const Tensor> in) { return cumsum(in[0], 1); },
         [](std::span<const Ref> r) { return cumsum_ref(r[0], 1, false); }},
        {"last_view",
         {transposed(5, 6, t)},
         [](std::span<const Tensor> in) { return cumsum(in[0], -1); },
         [](std::span<const Ref> r) { return cumsum_ref(r[0], 1, false); }},
        {"reverse", {transposed(6, 3, t)}, reversed, [](std::span<const Ref> r) { return cumsum_ref(r[0], 0, true); }}};
  }
};
template <> struct Spec<OpId::Argsort> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"last_ties_nans",
             {with_nans({4, 9}, t)},
             [](std::span<const Tensor> in) { return argsort(in[0]); },
             [](std::span<const Ref> r) { return order_ref(r[0], 1, false, 9); }},
            {"dim0_descending_view",
             {transposed(7, 3, t, -3, 3, true)},
             [](std::span<const Tensor> in) { return argsort(in[0], 0, true); },
             [](std::span<const Ref> r) { return order_ref(r[0], 0, true, 7); }}};
  }
};
template <> struct Spec<OpId::TopkIndices> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"largest3_ties_nans",
             {with_nans({5, 8}, t)},
             [](std::span<const Tensor> in) { return std::get<1>(topk(in[0], 3)); },
             [](std::span<const Ref> r) { return order_ref(r[0], 1, true, 3); }},
            {"smallest2_dim0_view",
             {transposed(6, 4, t)},
             [](std::span<const Tensor> in) { return std::get<1>(topk(in[0], 2, 0, false)); },
             [](std::span<const Ref> r) { return order_ref(r[0], 0, false, 2); }}};
  }
};

}  // namespace kiln::test
