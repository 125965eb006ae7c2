// tests/ops/op_specs_pools.h -- the Specs of the pools (max_pool2d with its indices and backward,
// avg_pool2d with its backward): windows over the last two dims of [N, C, H, W].
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/ops/op_specs_common.h"
#include "tests/ops/reduce_reference.h"

namespace kiln::test {

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
      g.windows(
          [&](const Dims& oi, const std::vector<Dims>& cells, double) { o.at(oi) = r[0].at(max_cell(r[0], cells)); });
      return o;
    };
    return {{"ceil_mode",
             {values(g.x, t)},
             [g](std::span<const Tensor> in) { return max_pool2d(in[0], g.kernel, g.stride, g.padding, g.ceil_mode); },
             ref},
            {"channels_last_view",
             {values({2, 7, 8, 3}, t).permute({0, 3, 1, 2})},
             [g](std::span<const Tensor> in) { return max_pool2d(in[0], g.kernel, g.stride, g.padding, g.ceil_mode); },
             ref}};
  }
};
template <> struct Spec<OpId::MaxPool2dIndices> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    const PoolGeometry g = kMaxPool;  // a copy: the lambdas keep it
    return {{"ceil_mode_with_ties",
             {values(g.x, t, -3, 3, true)},
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
    return {{"ceil_mode",
             {values(g.x, t), values(g.out(), t)},
             [g](std::span<const Tensor> in) {
               return apply(OpId::MaxPool2dBackward, {in[0], in[1]}, g.attrs());
             },
             [g](std::span<const Ref> r) {
               Ref o = zeros_ref(g.x);
               g.windows([&](const Dims& oi, const std::vector<Dims>& cells, double) {
                 o.at(max_cell(r[0], cells)) += r[1].at(oi);
               });
               return o;
             }}};
  }
};
template <> struct Spec<OpId::AvgPool2d> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (const PoolGeometry& g : kAvgPools) {
      out.push_back({g.count_include_pad ? "count_include_pad" : "count_exclude_pad",
                     {values(g.x, t)},
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
      out.push_back({g.count_include_pad ? "count_include_pad" : "count_exclude_pad",
                     {values(g.out(), t)},
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

}  // namespace kiln::test
