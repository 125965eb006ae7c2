// runtime/ops/reduce.cpp -- sum, prod, max, min, argmax, argmin over any set of axes.
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/vjp_util.h"
#include "runtime/parallel.h"
#include "runtime/simd/kernels.h"
#include "runtime/type_rules.h"

namespace kiln {
namespace {

using simd::ReduceKind;

ReduceKind kind_of(OpId id) {
  switch (id) {
    case OpId::Sum: return ReduceKind::Sum;
    case OpId::Prod: return ReduceKind::Prod;
    case OpId::MaxReduce: return ReduceKind::Max;
    default: return ReduceKind::Min;
  }
}

// What a reduction accumulates in: f32 for f16/bf16, i64 for integers and bool.
DType acc_dtype(DType t) {
  if (t == DType::F16 || t == DType::BF16) return DType::F32;
  return is_float(t) ? t : DType::I64;
}

void fill_identity(ReduceKind k, const Tensor& acc) {
  bool f = is_float(acc.dtype());
  Scalar v;
  switch (k) {
    case ReduceKind::Sum: v = 0; break;
    case ReduceKind::Prod: v = 1; break;
    case ReduceKind::Max:
      v = f ? Scalar(-std::numeric_limits<double>::infinity()) : Scalar(std::numeric_limits<int64_t>::lowest());
      break;
    case ReduceKind::Min:
      v = f ? Scalar(std::numeric_limits<double>::infinity()) : Scalar(std::numeric_limits<int64_t>::max());
      break;
  }
  copy_into(full({}, v, acc.dtype()), acc);
}

// Reduces x (in the accumulation dtype) over sorted `axes` into contiguous `acc`.
void reduce_into(ReduceKind kind, const Tensor& x_in, const Dims& axes, const Tensor& acc) {
  DType t = acc.dtype();
  const auto& table = simd::kernels();
  auto row_fn = table.reduce_row[int(kind)][int(t)];
  auto cols_fn = table.reduce_cols[int(kind)][int(t)];
  KILN_ASSERT(row_fn && cols_fn);
  fill_identity(kind, acc);
  if (x_in.numel() == 0) return;
  int64_t es = dtype_size(t);

  // Kept dims first, reduced dims last; then merge reduced dims that are contiguous.
  Dims kept_shape, kept_strides, red_shape, red_strides;
  size_t a = 0;
  for (int64_t d = 0; d < x_in.dim(); ++d) {
    bool reduced = a < axes.size() && axes[a] == d;
    if (reduced) ++a;
    if (x_in.shape()[d] == 1) continue;
    (reduced ? red_shape : kept_shape).push_back(x_in.shape()[d]);
    (reduced ? red_strides : kept_strides).push_back(x_in.strides()[d]);
  }
  auto merge = [](Dims& shape, Dims& strides) {
    Dims s, st;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (!s.empty() && st.back() == strides[i] * shape[i]) {
        s.back() *= shape[i];
        st.back() = strides[i];
      } else {
        s.push_back(shape[i]);
        st.push_back(strides[i]);
      }
    }
    shape = std::move(s);
    strides = std::move(st);
  };
  merge(red_shape, red_strides);
  Tensor x = x_in;
  char* base = static_cast<char*>(x.data_ptr());
  char* out = static_cast<char*>(acc.data_ptr());
  int64_t n_out = kept_shape.product(), n_red = red_shape.product();

  bool rows = red_shape.size() <= 1 && (red_shape.empty() || red_strides[0] == 1);
  bool cols = !rows && !kept_shape.empty() && kept_strides.back() == 1;
  if (!rows && !cols) {
    // Gather the reduced elements of each output contiguously, then reduce rows.
    Dims order;
    size_t ai = 0;
    for (int64_t d = 0; d < x_in.dim(); ++d) {
      if (ai < axes.size() && axes[ai] == d) ++ai;
      else order.push_back(d);
    }
    for (int64_t d : axes) order.push_back(d);
    x = x_in.permute(order).contiguous();
    base = static_cast<char*>(x.data_ptr());
    kept_shape = {n_out};
    kept_strides = {n_red};
    red_shape = {n_red};
    red_strides = {1};
    rows = true;
  }

  // Offset (elements) of output element o's first input, over the kept dims.
  auto kept_offset = [&](int64_t o, size_t upto) {
    int64_t off = 0;
    for (size_t d = upto; d-- > 0;) {
      off += (o % kept_shape[d]) * kept_strides[d];
      o /= kept_shape[d];
    }
    return off;
  };
  if (rows) {
    parallel_for(0, n_out, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n_red, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o)
                     row_fn(n_red, base + kept_offset(o, kept_shape.size()) * es, out + o * es);
                 });
    return;
  }
  // cols: the innermost kept dim is contiguous; vectorize along it.
  int64_t cols_n = kept_shape.back();
  size_t outer_dims = kept_shape.size() - 1;
  int64_t n_outer = n_out / cols_n;
  constexpr int64_t kColBlock = 512;
  int64_t col_blocks = (cols_n + kColBlock - 1) / kColBlock;
  int64_t last_red = red_shape.back(), last_stride = red_strides.back();
  int64_t red_outer = n_red / last_red;
  parallel_for(0, n_outer * col_blocks, std::max<int64_t>(1, kParallelGrain / (kColBlock * n_red)),
               [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t o = w / col_blocks, j0 = (w % col_blocks) * kColBlock;
      int64_t nc = std::min(kColBlock, cols_n - j0);
      char* src0 = base + (kept_offset(o, outer_dims) + j0) * es;
      char* dst = out + (o * cols_n + j0) * es;
      for (int64_t r = 0; r < red_outer; ++r) {
        int64_t off = 0, rem = r;
        for (size_t d = red_shape.size() - 1; d-- > 0;) {
          off += (rem % red_shape[d]) * red_strides[d];
          rem /= red_shape[d];
        }
        cols_fn(last_red, nc, src0 + off * es, last_stride, dst);
      }
    }
  });
}

void reduce_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& x = in[0];
  Dims axes = normalize_axes(a.axes, x.dim(), op_name(id));
  DType t = acc_dtype(x.dtype());
  Tensor xs = x.to(t);
  Tensor acc = out.dtype() == t ? out : Tensor::empty({t, out.shape(), out.device()});
  reduce_into(kind_of(id), xs, axes, acc);
  if (acc.impl() != out.impl()) copy_into(acc, out);
}

// argmax/argmin over attrs.axes (one axis, or empty: the flattened tensor). NaN counts as the
// largest (and the smallest) value, so its first index wins, as in PyTorch.
template <bool kMax> void arg_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& x = in[0];
  KILN_CHECK(a.axes.size() <= 1, "{}: expected one dim or none, got {}", op_name(id), shape_str(a.axes));
  Tensor rows;
  if (a.axes.empty()) {
    rows = x.reshape({1, x.numel()});
  } else {
    int64_t d = wrap_dim(a.axes[0], x.dim(), op_name(id));
    Dims order;  // d last, the other dims in order, so the rows follow the output's layout
    for (int64_t i = 0; i < x.dim(); ++i)
      if (i != d) order.push_back(i);
    order.push_back(d);
    rows = x.dim() == 0 ? x.reshape({1, 1}) : x.permute(order).contiguous();
    rows = rows.reshape({-1, rows.dim() == 0 ? 1 : rows.shape().back()});
  }
  rows = rows.contiguous();
  int64_t n = rows.shape()[1], m = rows.shape()[0];
  int64_t* o = out.data<int64_t>();
  visit_dtype(rows.dtype(), [&](auto v) {
    using T = decltype(v);
    const T* p = static_cast<const T*>(rows.data_ptr());
    parallel_for(0, m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = p + r * n;
        int64_t best = 0;
        double bv = static_cast<double>(static_cast<std::conditional_t<kIsHalf<T>, float, T>>(row[0]));
        for (int64_t i = 1; i < n && bv == bv; ++i) {
          double cv = static_cast<double>(static_cast<std::conditional_t<kIsHalf<T>, float, T>>(row[i]));
          if (cv != cv || (kMax ? cv > bv : cv < bv)) {
            best = i;
            bv = cv;
          }
        }
        o[r] = best;
      }
    });
  });
}

Dims axes_of(const VjpArgs& a) {
  return normalize_axes(a.attrs.axes, static_cast<int64_t>(a.in_types[0].shape.size()), op_name(a.op));
}

// sum: the gradient is spread back over the reduced axes.
Grads sum_vjp(const VjpArgs& a) {
  return Grads{unreduce(a.grad, a.in_types[0].shape, axes_of(a), a.attrs.keepdim)};
}

// prod: d/dx_i = product of the others. Written without dividing by x_i where it is 0: with
// one zero only that element gets the product of the rest; with two or more, none does.
Grads prod_vjp(const VjpArgs& a) {
  const Tensor& x = a.in[0];
  Dims axes = axes_of(a);
  const Dims& shape = x.shape();
  Tensor g = unreduce(a.grad, shape, axes, a.attrs.keepdim);
  Tensor out = unreduce(a.out, shape, axes, a.attrs.keepdim);
  Tensor is_zero = x == 0;
  Tensor zeros = unreduce(sum(is_zero, axes, true), shape, axes, true);
  Tensor prod_nonzero = unreduce(prod(where(is_zero, 1.0, x), axes, true), shape, axes, true);
  Tensor general = g * out / where(is_zero, 1.0, x);
  Tensor lone_zero = where(logical_and(is_zero, zeros == 1), g * prod_nonzero, 0.0);
  return Grads{where(zeros == 0, general, lone_zero)};
}

// max/min: the gradient goes to the elements equal to the result, split evenly among ties.
Grads extremum_vjp(const VjpArgs& a) {
  const Tensor& x = a.in[0];
  Dims axes = axes_of(a);
  Tensor hit = (x == unreduce(a.out, x.shape(), axes, a.attrs.keepdim)).to(a.grad.dtype());
  Tensor count = sum(hit, axes, true);
  return Grads{unreduce(a.grad, x.shape(), axes, a.attrs.keepdim) * hit / count};
}

}  // namespace

// sum(x): over attrs.axes (empty: all), keepdim per attrs.keepdim; integers sum into i64.
const OpDef defs::Sum{.infer = reduce_rule, .cpu = reduce_cpu, .vjp = sum_vjp, .saves = kSaveNothing, .attrs = kAttrAxes | kAttrKeepdim};
// prod(x): as sum, multiplying.
const OpDef defs::Prod{.infer = reduce_rule, .cpu = reduce_cpu, .vjp = prod_vjp, .saves = kSaveBoth, .attrs = kAttrAxes | kAttrKeepdim};
// max_reduce(x): largest element over the axes; NaN wins.
const OpDef defs::MaxReduce{.infer = reduce_rule, .cpu = reduce_cpu, .vjp = extremum_vjp, .saves = kSaveBoth, .attrs = kAttrAxes | kAttrKeepdim};
// min_reduce(x): smallest element over the axes; NaN wins.
const OpDef defs::MinReduce{.infer = reduce_rule, .cpu = reduce_cpu, .vjp = extremum_vjp, .saves = kSaveBoth, .attrs = kAttrAxes | kAttrKeepdim};
// argmax(x): i64 index of the first largest element over one axis (or all).
const OpDef defs::Argmax{.infer = reduce_rule, .cpu = arg_cpu<true>, .differentiable = false, .attrs = kAttrAxes | kAttrKeepdim};
// argmin(x): i64 index of the first smallest element over one axis (or all).
const OpDef defs::Argmin{.infer = reduce_rule, .cpu = arg_cpu<false>, .differentiable = false, .attrs = kAttrAxes | kAttrKeepdim};

namespace {
Tensor reduce(OpId id, const Tensor& x, const Dims& dims, bool keepdim) {
  Attrs a;
  a.axes = dims;
  a.keepdim = keepdim;
  return apply(id, {x}, a);
}
}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) { return reduce(OpId::Sum, x, dims, keepdim); }
Tensor prod(const Tensor& x, const Dims& dims, bool keepdim) { return reduce(OpId::Prod, x, dims, keepdim); }
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) { return reduce(OpId::MaxReduce, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) { return reduce(OpId::MinReduce, x, dims, keepdim); }
Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }
Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return amax(x, {dim}, keepdim); }
Tensor min(const Tensor& x, int64_t dim, bool keepdim) { return amin(x, {dim}, keepdim); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return reduce(OpId::Argmax, x, {dim}, keepdim); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return reduce(OpId::Argmin, x, {dim}, keepdim); }
Tensor argmax(const Tensor& x) { return reduce(OpId::Argmax, x.reshape({-1}), {0}, false); }
Tensor argmin(const Tensor& x) { return reduce(OpId::Argmin, x.reshape({-1}), {0}, false); }

}  // namespace kiln
