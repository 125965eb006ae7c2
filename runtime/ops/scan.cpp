// runtime/ops/scan.cpp -- the ops that read a whole dim to write each element: cumsum, and the
// orderings argsort and topk_indices, with their public functions (cumsum, argsort, sort, topk).
//
// Sorting gives indices only: sort and topk gather their values with those (one IR result per
// node, the gather carries the gradient), as max_pool2d's indices are an op of their own.
// Every ordering is the stable one: ties keep their index order, and NaN is larger than any
// number (last ascending, first descending), as torch.sort orders them. topk's k are the first
// k of that order, so topk and sort agree on every input, on every device.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <vector>

#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"

namespace kiln {

void along_dim_rows(const Tensor& x, int64_t dim, const Tensor& out,
                    const std::function<void(const Tensor&, const Tensor&)>& fill) {
  int64_t r = x.dim();
  int64_t d = r == 0 ? 0 : wrap_dim(dim, r, "along_dim_rows");
  Tensor xt = r == 0 ? x.reshape({1}) : x.transpose(d, r - 1);
  Tensor ot = r == 0 ? out.reshape({1}) : out.transpose(d, r - 1);
  int64_t n = xt.shape().back(), k = ot.shape().back(), m = 1;
  for (size_t i = 0; i + 1 < xt.shape().size(); ++i) m *= xt.shape()[i];
  if (m == 0 || k == 0) return;
  Tensor rows = xt.contiguous().reshape({m, n});
  if (ot.is_contiguous()) return fill(rows, ot.reshape({m, k}));
  Tensor tmp = empty({m, k}, out.dtype(), out.device());
  fill(rows, tmp);
  copy_between(tmp.reshape(ot.shape()), ot);
}

namespace {

TensorType scan_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  KILN_CHECK(in.size() == 1, "{}: expected one tensor, got {}", op_name(id), in.size());
  const Tensor& x = in[0];
  int64_t d = wrap_dim(a.dim, x.dim(), op_name(id));  // a 0-d tensor takes dim 0 or -1
  if (id == OpId::Cumsum) return {is_float(x.dtype()) ? x.dtype() : DType::I64, x.shape(), x.device()};
  Dims shape = x.shape();
  if (id == OpId::TopkIndices) {
    int64_t n = x.dim() == 0 ? 1 : shape[static_cast<size_t>(d)];
    KILN_CHECK(a.k >= 0 && a.k <= n && (x.dim() > 0 || a.k == 1),
               "topk: k = {} is out of range for dim {} of {} (size {})", a.k, d, x.type().str(), n);
    if (x.dim() > 0) shape[static_cast<size_t>(d)] = a.k;
  }
  return {DType::I64, shape, x.device()};
}

// The running sum along each row, in the accumulator dtype (f32 for f16 and bf16, i64 for
// integers and bool), each partial sum stored in the result's dtype; from the end when reverse.
void cumsum_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  along_dim_rows(in[0], a.dim, out, [&](const Tensor& rows, const Tensor& orows) {
    int64_t m = rows.shape()[0], n = rows.shape()[1];
    visit_dtype(rows.dtype(), [&](auto v) {
      using T = decltype(v);
      using Acc = std::conditional_t<kIsHalf<T>, float, std::conditional_t<std::is_floating_point_v<T>, T, int64_t>>;
      using Out = std::conditional_t<kIsHalf<T> || std::is_floating_point_v<T>, T, int64_t>;
      const T* x = static_cast<const T*>(rows.data_ptr());
      Out* o = static_cast<Out*>(orows.data_ptr());
      parallel_for(0, m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          Acc acc = 0;
          for (int64_t j = 0; j < n; ++j) {
            int64_t i = a.reverse ? n - 1 - j : j;
            if constexpr (std::is_integral_v<Acc>)  // wraps as the CUDA kernel does (no signed overflow)
              acc = static_cast<Acc>(static_cast<uint64_t>(acc) +
                                     static_cast<uint64_t>(static_cast<Acc>(x[row * n + i])));
            else acc += static_cast<Acc>(x[row * n + i]);
            o[row * n + i] = static_cast<Out>(acc);
          }
        }
      });
    });
  });
}

// d/dx_j of sum_i g_i y_i with y_i = sum_{j <= i} x_j is sum_{i >= j} g_i: the same scan from
// the other end.
Grads cumsum_vjp(const VjpArgs& v) {
  Attrs a = v.attrs;
  a.reverse = !a.reverse;
  return {apply(OpId::Cumsum, {v.grad}, a)};
}

// Whether value a goes before value b: a < b (a > b descending), NaN above every number.
template <class C> bool goes_before(C a, C b, bool descending) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b))
      return descending ? std::isnan(a) && !std::isnan(b) : std::isnan(b) && !std::isnan(a);
  }
  return descending ? a > b : a < b;
}

// argsort and topk_indices: the first `k` positions of each row's stable order.
void order_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  along_dim_rows(in[0], a.dim, out, [&](const Tensor& rows, const Tensor& orows) {
    int64_t m = rows.shape()[0], n = rows.shape()[1], k = id == OpId::TopkIndices ? a.k : n;
    int64_t* o = orows.data<int64_t>();
    visit_dtype(rows.dtype(), [&](auto v) {
      using T = decltype(v);
      using C = std::conditional_t<kIsHalf<T>, float, T>;
      const T* x = static_cast<const T*>(rows.data_ptr());
      parallel_for(0, m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n * 16, 1)),
                   [&](int64_t b, int64_t e) {
                     std::vector<int64_t> idx(static_cast<size_t>(n));
                     for (int64_t row = b; row < e; ++row) {
                       const T* p = x + row * n;
                       std::iota(idx.begin(), idx.end(), int64_t{0});
                       // The index breaks ties, so any sort gives the stable order.
                       auto before = [&](int64_t i, int64_t j) {
                         C vi = static_cast<C>(p[i]), vj = static_cast<C>(p[j]);
                         if (goes_before(vi, vj, a.descending)) return true;
                         return !goes_before(vj, vi, a.descending) && i < j;
                       };
                       if (k == n) std::sort(idx.begin(), idx.end(), before);
                       else std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
                       std::copy(idx.begin(), idx.begin() + k, o + row * k);
                     }
                   });
    });
  });
}

Attrs along(int64_t dim) {
  Attrs a;
  a.dim = dim;
  return a;
}

}  // namespace

// cumsum(x): running sums along `dim` (from its end when `reverse`); floats keep their dtype,
// integers and bool give i64.
const OpDef defs::Cumsum{
    .infer = scan_rule, .cpu = cumsum_cpu, .vjp = cumsum_vjp, .saves = kSaveNothing, .attrs = kAttrDim | kAttrReverse};
// argsort(x): i64 positions of x's elements along `dim` in their stable order.
const OpDef defs::Argsort{
    .infer = scan_rule, .cpu = order_cpu, .differentiable = false, .attrs = kAttrDim | kAttrDescending};
// topk_indices(x): the first k positions of argsort along `dim` (descending: the k largest).
const OpDef defs::TopkIndices{
    .infer = scan_rule, .cpu = order_cpu, .differentiable = false, .attrs = kAttrDim | kAttrK | kAttrDescending};

Tensor cumsum(const Tensor& x, int64_t dim) { return apply(OpId::Cumsum, {autocast_wide(x)}, along(dim)); }
Tensor cumsum(const Tensor& x, int64_t dim, DType dtype) { return cumsum(x.to(dtype), dim); }

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool /*stable: always*/) {
  Attrs a = along(dim);
  a.descending = descending;
  return apply(OpId::Argsort, {x}, a);
}

namespace {
// x's values at `indices` along dim (a 0-d x is its own value).
Tensor values_at(const Tensor& x, int64_t dim, const Tensor& indices) {
  return x.dim() == 0 ? x.clone() : gather(x, dim, indices);
}
}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  Tensor idx = argsort(x, dim, descending, stable);
  return {values_at(x, dim, idx), idx};
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted: always*/) {
  Attrs a = along(dim);
  a.k = k;
  a.descending = largest;
  Tensor idx = apply(OpId::TopkIndices, {x}, a);
  return {values_at(x, dim, idx), idx};
}

}  // namespace kiln
