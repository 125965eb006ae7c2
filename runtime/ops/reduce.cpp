// runtime/ops/reduce.cpp -- sum, prod, max, min, argmax, argmin over any set of axes.
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/loop_layout.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/vjp_util.h"
#include "runtime/parallel.h"
#include "runtime/simd/kernels.h"
#include "runtime/type_rules.h"

namespace kiln {

Tensor arg_rows(const Tensor& x, const Dims& axes, const char* op) {
  KILN_CHECK(axes.size() <= 1, "{}: expected one dim or none, got {}", op, shape_str(axes));
  if (axes.empty()) return x.reshape({1, x.numel()}).contiguous();
  if (x.dim() == 0) return x.reshape({1, 1}).contiguous();
  int64_t d = wrap_dim(axes[0], x.dim(), op);
  Dims order;  // d last, the other dims in order, so the rows follow the output's layout
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != d) order.push_back(i);
  order.push_back(d);
  Tensor rows = x.permute(order).contiguous();
  return rows.reshape({-1, rows.shape().back()}).contiguous();
}

namespace {

using simd::ReduceKind;

ReduceKind kind_of(OpId id) {
  switch (op_def(id).combine) {
    case Combine::Sum: return ReduceKind::Sum;
    case Combine::Prod: return ReduceKind::Prod;
    case Combine::Max: return ReduceKind::Max;
    case Combine::Min: return ReduceKind::Min;
    case Combine::None: break;
  }
  throw InternalError(fmt::format("{} is not a combining reduction", op_name(id)));
}

void fill_identity(ReduceKind k, const Tensor& acc) {
  copy_into(full({}, reduction_identity(simd::combine_of(k), acc.dtype()), acc.dtype()), acc);
}

// Long reductions are cut into runs of a fixed length, each reduced into a partial result on
// whichever thread, and the partials combined in run order. The cut depends only on the shape,
// so results are the same bits on any number of threads, and a reduction with few outputs
// (sum(x), the column sums of a narrow matrix) still uses every core.
constexpr int64_t kReduceRun = 1 << 15;  // elements per partial result
constexpr int64_t kColBlock = 512;       // columns reduced together along an outer axis

// x's elements as (kept dims) x (reduced dims), size-1 dims dropped; strides in elements.
struct ReduceLayout {
  ReduceKind kind;
  DType type;  // the accumulation dtype, which x has
  int64_t es;  // its size in bytes
  const char* base;
  Dims kept_shape, kept_strides, red_shape, red_strides;

  // Offset of output o's first input over the first `dims` kept dims (o counts over those).
  int64_t kept_offset(int64_t o, size_t dims) const {
    int64_t off = 0;
    for (size_t d = dims; d-- > 0;) {
      off += (o % kept_shape[d]) * kept_strides[d];
      o /= kept_shape[d];
    }
    return off;
  }
  // Offset of reduced index r over all reduced dims but the last.
  int64_t outer_red_offset(int64_t r) const {
    int64_t off = 0;
    for (size_t d = red_shape.size() - 1; d-- > 0;) {
      off += (r % red_shape[d]) * red_strides[d];
      r /= red_shape[d];
    }
    return off;
  }
  Tensor partials(const Dims& shape) const {
    Tensor p = Tensor::empty({type, shape, cpu});
    fill_identity(kind, p);
    return p;
  }
};

// Every output reduces one contiguous run of n_red elements (the reduced dims are innermost).
void reduce_rows(const ReduceLayout& x, simd::ReduceRowFn row_fn, char* out) {
  int64_t n_out = x.kept_shape.product(), n_red = x.red_shape.product(), es = x.es;
  size_t kd = x.kept_shape.size();
  int64_t runs = (n_red + kReduceRun - 1) / kReduceRun;
  if (runs <= 1) {
    parallel_for(0, n_out, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n_red, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o) row_fn(n_red, x.base + x.kept_offset(o, kd) * es, out + o * es);
                 });
    return;
  }
  Tensor part = x.partials({n_out, runs});
  char* pp = static_cast<char*>(part.data_ptr());
  parallel_for(0, n_out * runs, std::max<int64_t>(1, kParallelGrain / kReduceRun), [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t o = w / runs, r0 = (w % runs) * kReduceRun;
      row_fn(std::min(kReduceRun, n_red - r0), x.base + (x.kept_offset(o, kd) + r0) * es, pp + w * es);
    }
  });
  parallel_for(0, n_out, std::max<int64_t>(1, kParallelGrain / runs), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) row_fn(runs, pp + o * runs * es, out + o * es);
  });
}

// The innermost kept dim is contiguous: reduce along outer axes, vectorized along it, in blocks
// of columns; a long last reduced dim is cut into runs of rows.
void reduce_columns(const ReduceLayout& x, simd::ReduceColsFn cols_fn, char* out) {
  int64_t es = x.es, n_out = x.kept_shape.product(), n_red = x.red_shape.product();
  int64_t cols_n = x.kept_shape.back(), n_outer = n_out / cols_n;
  int64_t col_blocks = (cols_n + kColBlock - 1) / kColBlock;
  int64_t last_red = x.red_shape.back(), last_stride = x.red_strides.back();
  int64_t red_outer = n_red / last_red;
  int64_t run_rows = std::max<int64_t>(1, kReduceRun / std::min(cols_n, kColBlock));
  int64_t runs = (last_red + run_rows - 1) / run_rows;
  // Partial results: [runs, n_out] (or the output itself when there is one run).
  Tensor part = runs > 1 ? x.partials({runs, n_out}) : Tensor();
  char* pp = runs > 1 ? static_cast<char*>(part.data_ptr()) : out;
  int64_t items = n_outer * col_blocks * runs;
  int64_t item_work = std::min(cols_n, kColBlock) * std::min(run_rows, last_red) * red_outer;
  parallel_for(0, items, std::max<int64_t>(1, kParallelGrain / item_work), [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t run = w % runs, ob = w / runs;
      int64_t o = ob / col_blocks, j0 = (ob % col_blocks) * kColBlock;
      int64_t nc = std::min(kColBlock, cols_n - j0), i0 = run * run_rows;
      const char* src0 = x.base + (x.kept_offset(o, x.kept_shape.size() - 1) + j0 + i0 * last_stride) * es;
      char* dst = pp + (run * n_out + o * cols_n + j0) * es;
      for (int64_t r = 0; r < red_outer; ++r)
        cols_fn(std::min(run_rows, last_red - i0), nc, src0 + x.outer_red_offset(r) * es, last_stride, dst);
    }
  });
  if (runs == 1) return;
  int64_t blocks = (n_out + kColBlock - 1) / kColBlock;
  parallel_for(0, blocks, std::max<int64_t>(1, kParallelGrain / (kColBlock * runs)), [&](int64_t b, int64_t e) {
    for (int64_t j0 = b * kColBlock; j0 < std::min(e * kColBlock, n_out); j0 += kColBlock)
      cols_fn(runs, std::min(kColBlock, n_out - j0), pp + j0 * es, n_out, out + j0 * es);
  });
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
  ReduceLayout x{kind, t, dtype_size(t), nullptr, {}, {}, {}, {}};

  // Kept dims first, reduced dims last; then merge reduced dims that are contiguous.
  size_t a = 0;
  for (int64_t d = 0; d < x_in.dim(); ++d) {
    bool reduced = a < axes.size() && axes[a] == d;
    if (reduced) ++a;
    if (x_in.shape()[d] == 1) continue;
    (reduced ? x.red_shape : x.kept_shape).push_back(x_in.shape()[d]);
    (reduced ? x.red_strides : x.kept_strides).push_back(x_in.strides()[d]);
  }
  merge_dims(x.red_shape, std::span<Dims>(&x.red_strides, 1));
  Tensor held = x_in;
  x.base = static_cast<const char*>(held.data_ptr());
  char* out = static_cast<char*>(acc.data_ptr());

  bool rows = x.red_shape.size() <= 1 && (x.red_shape.empty() || x.red_strides[0] == 1);
  bool cols = !rows && !x.kept_shape.empty() && x.kept_strides.back() == 1;
  if (rows) return reduce_rows(x, row_fn, out);
  if (cols) return reduce_columns(x, cols_fn, out);
  // Otherwise gather the reduced elements of each output contiguously, then reduce rows.
  Dims order;
  size_t ai = 0;
  for (int64_t d = 0; d < x_in.dim(); ++d) {
    if (ai < axes.size() && axes[ai] == d) ++ai;
    else order.push_back(d);
  }
  for (int64_t d : axes) order.push_back(d);
  held = x_in.permute(order).contiguous();
  int64_t n_out = x.kept_shape.product(), n_red = x.red_shape.product();
  x.base = static_cast<const char*>(held.data_ptr());
  x.kept_shape = {n_out};
  x.kept_strides = {n_red};
  x.red_shape = {n_red};
  x.red_strides = {1};
  reduce_rows(x, row_fn, out);
}

void reduce_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& x = in[0];
  Dims axes = normalize_axes(a.axes, x.dim(), op_name(id));
  DType t = accumulator_dtype(x.dtype());
  Tensor xs = x.to(t);
  Tensor acc = out.dtype() == t ? out : Tensor::empty({t, out.shape(), out.device()});
  reduce_into(kind_of(id), xs, axes, acc);
  if (acc.impl() != out.impl()) copy_into(acc, out);
}

// argmax/argmin over attrs.axes (one axis, or empty: the flattened tensor). NaN counts as the
// largest (and the smallest) value, so its first index wins, as in PyTorch.
template <bool kMax> void arg_cpu(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& x = in[0];
  Tensor rows = arg_rows(x, a.axes, op_name(id));
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
Grads sum_vjp(const VjpArgs& a) { return Grads{unreduce(a.grad, a.in_types[0].shape, axes_of(a), a.attrs.keepdim)}; }

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

DType accumulator_dtype(DType t) {
  if (t == DType::F16 || t == DType::BF16) return DType::F32;
  return is_float(t) ? t : DType::I64;
}

namespace {
constexpr std::pair<Combine, std::string_view> kCombineNames[] = {{Combine::None, "none"},
                                                                  {Combine::Sum, "sum"},
                                                                  {Combine::Prod, "prod"},
                                                                  {Combine::Max, "max"},
                                                                  {Combine::Min, "min"}};
}  // namespace

std::string_view combine_name(Combine c) {
  for (auto [k, name] : kCombineNames)
    if (k == c) return name;
  return "?";
}

bool parse_combine(std::string_view name, Combine* out) {
  for (auto [k, n] : kCombineNames)
    if (n == name && k != Combine::None) return *out = k, true;
  return false;
}

Scalar reduction_identity(Combine combine, DType t) {
  KILN_ASSERT(combine != Combine::None);
  return visit_dtype(t, [&](auto v) {  // floats (f16 and bf16 too) as double: +-inf, 0, 1
    using E = decltype(v);
    if constexpr (std::is_integral_v<E>) return Scalar(static_cast<int64_t>(reduction_identity_as<E>(combine)));
    else return Scalar(reduction_identity_as<double>(combine));
  });
}

// sum(x): over attrs.axes (empty: all), keepdim per attrs.keepdim; integers sum into i64.
const OpDef defs::Sum{.infer = reduce_rule,
                      .cpu = reduce_cpu,
                      .vjp = sum_vjp,
                      .saves = kSaveNothing,
                      .attrs = kAttrAxes | kAttrKeepdim,
                      .combine = Combine::Sum};
// prod(x): as sum, multiplying.
const OpDef defs::Prod{.infer = reduce_rule,
                       .cpu = reduce_cpu,
                       .vjp = prod_vjp,
                       .saves = kSaveBoth,
                       .attrs = kAttrAxes | kAttrKeepdim,
                       .combine = Combine::Prod};
// amax(x): largest element over the axes; NaN wins.
const OpDef defs::MaxReduce{.infer = reduce_rule,
                            .cpu = reduce_cpu,
                            .vjp = extremum_vjp,
                            .saves = kSaveBoth,
                            .attrs = kAttrAxes | kAttrKeepdim,
                            .combine = Combine::Max};
// amin(x): smallest element over the axes; NaN wins.
const OpDef defs::MinReduce{.infer = reduce_rule,
                            .cpu = reduce_cpu,
                            .vjp = extremum_vjp,
                            .saves = kSaveBoth,
                            .attrs = kAttrAxes | kAttrKeepdim,
                            .combine = Combine::Min};
// argmax(x): i64 index of the first largest element over one axis (or all).
const OpDef defs::Argmax{
    .infer = reduce_rule, .cpu = arg_cpu<true>, .differentiable = false, .attrs = kAttrAxes | kAttrKeepdim};
// argmin(x): i64 index of the first smallest element over one axis (or all).
const OpDef defs::Argmin{
    .infer = reduce_rule, .cpu = arg_cpu<false>, .differentiable = false, .attrs = kAttrAxes | kAttrKeepdim};

namespace {
Tensor reduce(OpId id, const Tensor& x, const Dims& dims, bool keepdim) {
  Attrs a;
  a.axes = dims;
  a.keepdim = keepdim;
  // Sums and products need f32's range under autocast (runtime/autocast.h).
  bool wide = op_def(id).combine == Combine::Sum || op_def(id).combine == Combine::Prod;
  return apply(id, {wide ? autocast_wide(x) : x}, a);
}
}  // namespace

// The public functions, one per reduction in ops.def (declared so in runtime/api.h).
#define OP(Name, name, arity, family) \
  KILN_IF_REDUCE_##family(            \
      Tensor name(const Tensor& x, const Dims& dims, bool keepdim) { return reduce(OpId::Name, x, dims, keepdim); })
#include "runtime/ops.def"
#undef OP
Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }
Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return amax(x, {dim}, keepdim); }
Tensor min(const Tensor& x, int64_t dim, bool keepdim) { return amin(x, {dim}, keepdim); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return reduce(OpId::Argmax, x, {dim}, keepdim); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return reduce(OpId::Argmin, x, {dim}, keepdim); }

}  // namespace kiln
