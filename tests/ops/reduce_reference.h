// tests/ops/reduce_reference.h -- reductions over any set of axes, in double, for the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "tests/ops/reference.h"

namespace kiln::test {

/// Which input elements each output element of a reduction combines.
struct Reduction {
  Dims out_shape;
  std::vector<std::vector<int64_t>> groups;     // per output (row-major): flat input indices, in
                                                // row-major order over the reduced dims
  std::vector<std::vector<int64_t>> positions;  // the same elements' row-major index within
                                                // the reduced dims (what argmax returns)
};

/// The reduction of a tensor of `shape` over `axes` (negative allowed; empty: all axes).
inline Reduction reduction(const Dims& shape, const Dims& axes, bool keepdim) {
  size_t r = shape.size();
  std::vector<bool> reduced(r, axes.empty());
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + int64_t(r) : a)] = true;
  Reduction red;
  int64_t n_out = 1;
  for (size_t d = 0; d < r; ++d) {
    if (!reduced[d]) {
      red.out_shape.push_back(shape[d]);
      n_out *= shape[d];
    } else if (keepdim) {
      red.out_shape.push_back(1);
    }
  }
  red.groups.resize(static_cast<size_t>(n_out));
  red.positions.resize(static_cast<size_t>(n_out));
  Dims idx(r, 0);
  for (int64_t i = 0; i < shape.product(); ++i) {
    int64_t o = 0, p = 0;
    for (size_t d = 0; d < r; ++d) {
      if (reduced[d]) p = p * shape[d] + idx[d];
      else o = o * shape[d] + idx[d];
    }
    red.groups[static_cast<size_t>(o)].push_back(i);
    red.positions[static_cast<size_t>(o)].push_back(p);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return red;
}

/// f(values of the group) for every output element.
inline std::vector<double> reduce_ref(const std::vector<double>& x, const Reduction& red,
                                      const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  std::vector<double> g;
  for (const auto& group : red.groups) {
    g.clear();
    for (int64_t i : group) g.push_back(x[static_cast<size_t>(i)]);
    out.push_back(f(g));
  }
  return out;
}

inline double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
inline double ref_abs_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += std::abs(v);
  return s;
}
inline double ref_prod(const std::vector<double>& g) {
  double s = 1;
  for (double v : g) s *= v;
  return s;
}
// NaN wins, as in PyTorch.
inline double ref_max(const std::vector<double>& g) {
  double m = -INFINITY;
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  return m;
}
inline double ref_min(const std::vector<double>& g) {
  double m = INFINITY;
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::min(m, v);
  }
  return m;
}
// Position of the first largest (smallest) element; a NaN counts as both, so the first NaN wins.
inline size_t ref_arg(const std::vector<double>& g, bool largest) {
  size_t best = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return i;
    if (largest ? g[i] > g[best] : g[i] < g[best]) best = i;
  }
  return best;
}
inline double ref_mean(const std::vector<double>& g) { return ref_sum(g) / double(g.size()); }
inline double ref_var(const std::vector<double>& g, int64_t correction) {
  double m = ref_mean(g), s = 0;
  for (double v : g) s += (v - m) * (v - m);
  return s / double(std::max<int64_t>(int64_t(g.size()) - correction, 0));
}
inline double ref_logsumexp(const std::vector<double>& g) {
  double m = ref_max(g);
  if (std::isinf(m)) m = 0;
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return std::log(s) + m;
}

/// Every subset of the axes of a rank-3 tensor, some spelled with negative dims.
inline const std::vector<Dims>& rank3_axis_sets() {
  static const std::vector<Dims> sets = {{},     {0},    {1},      {2},       {-1},   {0, 1},
                                         {0, 2}, {1, 2}, {-3, -1}, {0, 1, 2}, {2, 0}, {-2}};
  return sets;
}

}  // namespace kiln::test
