// runtime/ops/pool.cpp -- max_pool2d and avg_pool2d over the last two dims (NCHW or CHW), and
// the ops their derivatives run. Kernels compute in the input's dtype (f16 and bf16 through
// f32), in parallel over planes and output rows; a backward sums each plane's gradient
// serially, so it has the same bits on any number of threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/window.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

// ---- shapes --------------------------------------------------------------------------------

// The pooled shape of an input of `shape` (checked as `op`'s input, named `what` in errors).
Dims pool_shape(const char* op, const Dims& shape, const std::string& what, const Attrs& a, bool ceil_mode) {
  int64_t r = static_cast<int64_t>(shape.size());
  KILN_CHECK(r == 3 || r == 4, "{}: expected input [N,C,H,W] or [C,H,W], got {}", op, what);
  check_pair(a.kernel, "kernel size", op, 1);
  check_pair(a.stride, "stride", op, 1);
  check_pair(a.padding, "padding", op, 0);
  KILN_CHECK(a.padding[0] <= a.kernel[0] / 2 && a.padding[1] <= a.kernel[1] / 2,
             "{}: padding {} must be at most half the kernel size {}", op, shape_str(a.padding), shape_str(a.kernel));
  int64_t oh = out_size(shape[r - 2], a.kernel[0], a.stride[0], a.padding[0], 1, ceil_mode);
  int64_t ow = out_size(shape[r - 1], a.kernel[1], a.stride[1], a.padding[1], 1, ceil_mode);
  KILN_CHECK(oh > 0 && ow > 0, "{}: kernel {} is larger than padded input {}", op, shape_str(a.kernel), what);
  Dims out = shape;
  out[r - 2] = oh;
  out[r - 1] = ow;
  return out;
}

bool uses_ceil(OpId id, const Attrs& a) {
  return id != OpId::AvgPool2d && id != OpId::AvgPool2dBackward && a.ceil_mode;
}

// max_pool2d, avg_pool2d, max_pool2d_indices: x -> the pooled shape.
TensorType pool_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const char* op = op_name(id);
  KILN_CHECK(is_float(x.dtype()), "{}: expected a float input, got {}", op, x.type().str());
  Dims shape = pool_shape(op, x.shape(), x.type().str(), a, uses_ceil(id, a));
  return {id == OpId::MaxPool2dIndices ? DType::I64 : x.dtype(), shape, x.device()};
}

// max_pool2d_backward(x, grad): grad must have max_pool2d(x)'s type; the result has x's.
TensorType max_pool_backward_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &g = in[1];
  TensorType want = pool_rule(id, in.first(1), a);
  KILN_CHECK(g.type() == want, "max_pool2d_backward: gradient {} must be {}, the pooled type of input {}",
             g.type().str(), want.str(), x.type().str());
  return x.type();
}

// avg_pool2d_backward(grad): the result has the input's shape, attrs.shape.
TensorType avg_pool_backward_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& g = in[0];
  KILN_CHECK(is_float(g.dtype()), "avg_pool2d_backward: expected a float gradient, got {}", g.type().str());
  TensorType x{g.dtype(), a.shape, g.device()};
  Dims want = pool_shape("avg_pool2d_backward", a.shape, x.str(), a, false);
  KILN_CHECK(g.shape() == want, "avg_pool2d_backward: gradient {} must be {}, the pooled shape of input {}",
             g.type().str(), shape_str(want), x.str());
  return x;
}

// ---- kernels -------------------------------------------------------------------------------

// The planes (leading dims, flattened) of a rank-3 or rank-4 tensor, in elements.
template <class T> struct Planes {
  T* base;
  int64_t inner, outer_st, inner_st, row_st, col_st;
  T* plane(int64_t p) const { return base + p / inner * outer_st + p % inner * inner_st; }
};

template <class T> Planes<T> planes_of(const Tensor& t) {
  const Dims& st = t.strides();
  int64_t r = t.dim();
  return {static_cast<T*>(t.data_ptr()),
          std::max<int64_t>(t.shape()[r - 3], 1),
          r == 4 ? st[0] : 0,
          st[r - 3],
          st[r - 2],
          st[r - 1]};
}

// A window clipped to the input: rows [y0, y1), columns [x0, x1); `count` is the avg_pool2d
// divisor (with count_include_pad, the window clipped to the padded input instead).
struct Window {
  int64_t y0, y1, x0, x1, count;
};

struct Geometry {
  int64_t planes, h, w, oh, ow;
  const Attrs* a;
  Window at(int64_t oy, int64_t ox) const {
    int64_t ys = oy * a->stride[0] - a->padding[0], xs = ox * a->stride[1] - a->padding[1];
    Window win{std::max<int64_t>(ys, 0), std::min(ys + a->kernel[0], h), std::max<int64_t>(xs, 0),
               std::min(xs + a->kernel[1], w), 0};
    win.count = a->count_include_pad ? (std::min(ys + a->kernel[0], h + a->padding[0]) - ys) *
                                           (std::min(xs + a->kernel[1], w + a->padding[1]) - xs)
                                     : (win.y1 - win.y0) * (win.x1 - win.x0);
    return win;
  }
};

Geometry geometry(const Dims& in, const Dims& out, const Attrs& a) {
  size_t r = in.size();
  int64_t h = in[r - 2], w = in[r - 1];
  int64_t planes = h * w == 0 ? 0 : in.product() / (h * w);
  return {planes, h, w, out[r - 2], out[r - 1], &a};
}

// What a kernel computes in: f16 and bf16 widen to f32.
template <class T> using Compute = std::conditional_t<kIsHalf<T>, float, T>;

// Position (y * w + x) of the window's first largest element; the first NaN wins. Starting at
// the first element, a window of -inf still picks one of its own elements. Selects rather
// than branches (random data would mispredict); NaN, rare, takes a second look.
template <class T> int64_t window_argmax(const T* plane, const Planes<const T>& v, const Window& win, int64_t w) {
  using C = Compute<T>;
  C best = static_cast<C>(plane[win.y0 * v.row_st + win.x0 * v.col_st]);
  int64_t arg = win.y0 * w + win.x0;
  bool nan = false;
  for (int64_t y = win.y0; y < win.y1; ++y) {
    const T* row = plane + y * v.row_st;
    for (int64_t x = win.x0; x < win.x1; ++x) {
      C c = static_cast<C>(row[x * v.col_st]);
      bool more = c > best;
      best = more ? c : best;
      arg = more ? y * w + x : arg;
      nan |= c != c;
    }
  }
  if (nan) [[unlikely]] {
    for (int64_t y = win.y0; y < win.y1; ++y)
      for (int64_t x = win.x0; x < win.x1; ++x) {
        C c = static_cast<C>(plane[y * v.row_st + x * v.col_st]);
        if (c != c) return y * w + x;
      }
  }
  return arg;
}

// The window's largest element, or NaN when it holds one.
template <class T> Compute<T> window_max(const T* plane, const Planes<const T>& v, const Window& win) {
  using C = Compute<T>;
  C best = static_cast<C>(plane[win.y0 * v.row_st + win.x0 * v.col_st]);
  bool nan = false;
  for (int64_t y = win.y0; y < win.y1; ++y) {
    const T* row = plane + y * v.row_st;
    for (int64_t x = win.x0; x < win.x1; ++x) {
      C c = static_cast<C>(row[x * v.col_st]);
      best = c > best ? c : best;
      nan |= c != c;
    }
  }
  return nan ? std::numeric_limits<C>::quiet_NaN() : best;
}

enum class PoolKind { Max, Avg, Indices };

// One output row of a pool over one plane.
template <class T, PoolKind K, class O>
void forward_row(const T* plane, const Planes<const T>& v, const Geometry& g, int64_t oy, O* row) {
  using C = Compute<T>;
  for (int64_t ox = 0; ox < g.ow; ++ox) {
    Window win = g.at(oy, ox);
    if constexpr (K == PoolKind::Avg) {
      C acc = 0;
      for (int64_t y = win.y0; y < win.y1; ++y)
        for (int64_t x = win.x0; x < win.x1; ++x) acc += static_cast<C>(plane[y * v.row_st + x * v.col_st]);
      row[ox] = static_cast<T>(acc / static_cast<C>(std::max<int64_t>(win.count, 1)));
    } else if constexpr (K == PoolKind::Max) {
      row[ox] = static_cast<T>(window_max(plane, v, win));
    } else {
      row[ox] = window_argmax(plane, v, win, g.w);
    }
  }
}

// Forward: one output row per unit (plane, oy), into a contiguous `out`.
template <class T, PoolKind K> void pool_forward(const Tensor& x, const Attrs& a, const Tensor& out) {
  using O = std::conditional_t<K == PoolKind::Indices, int64_t, T>;
  Geometry g = geometry(x.shape(), out.shape(), a);
  Planes<const T> v = planes_of<const T>(x);
  O* po = static_cast<O*>(out.data_ptr());
  int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, g.ow * a.kernel[0] * a.kernel[1]));
  parallel_for(0, g.planes * g.oh, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) forward_row<T, K>(v.plane(u / g.oh), v, g, u % g.oh, po + u * g.ow);
  });
}

// The gradient of one plane, summed serially in window order into `acc` (h * w, zeroed).
template <class T, PoolKind K> void backward_plane(const T* xp, const Planes<const T>& xv, const T* gp,
                                                   const Planes<const T>& gv, const Geometry& g, Compute<T>* acc) {
  using C = Compute<T>;
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      C grad = static_cast<C>(gp[oy * gv.row_st + ox * gv.col_st]);
      Window win = g.at(oy, ox);
      if constexpr (K == PoolKind::Max) {
        acc[window_argmax(xp, xv, win, g.w)] += grad;
      } else {
        C share = grad / static_cast<C>(std::max<int64_t>(win.count, 1));
        for (int64_t y = win.y0; y < win.y1; ++y)
          for (int64_t x = win.x0; x < win.x1; ++x) acc[y * g.w + x] += share;
      }
    }
}

// Backward: one plane per unit, into a contiguous `grad_in` of x's shape. Windows may overlap,
// so a plane is never split; f16 and bf16 sum in an f32 plane and round once.
template <class T, PoolKind K>
void pool_backward(const Tensor& x, const Tensor& grad, const Attrs& a, const Tensor& grad_in) {
  using C = Compute<T>;
  Geometry g = geometry(grad_in.shape(), grad.shape(), a);
  Planes<const T> gv = planes_of<const T>(grad), xv = K == PoolKind::Max ? planes_of<const T>(x) : gv;
  T* pi = static_cast<T*>(grad_in.data_ptr());
  int64_t hw = g.h * g.w;
  int64_t work = std::max<int64_t>(1, hw + g.oh * g.ow * a.kernel[0] * a.kernel[1]);
  parallel_for(0, g.planes, std::max<int64_t>(1, kParallelGrain / work), [&](int64_t p0, int64_t p1) {
    std::vector<C> scratch(kIsHalf<T> ? static_cast<size_t>(hw) : 0);
    for (int64_t p = p0; p < p1; ++p) {
      C* acc = kIsHalf<T> ? scratch.data() : reinterpret_cast<C*>(pi + p * hw);
      std::fill(acc, acc + hw, C(0));
      backward_plane<T, K>(K == PoolKind::Max ? xv.plane(p) : nullptr, xv, gv.plane(p), gv, g, acc);
      if constexpr (kIsHalf<T>)
        for (int64_t i = 0; i < hw; ++i) pi[p * hw + i] = static_cast<T>(acc[i]);
    }
  });
}

template <PoolKind K> void pool_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  visit_dtype(in[0].dtype(), [&](auto tv) {
    using T = decltype(tv);
    if constexpr (!std::is_integral_v<T>) pool_forward<T, K>(in[0], a, out);
  });
}

void max_pool_backward_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tv) {
    using T = decltype(tv);
    if constexpr (!std::is_integral_v<T>) pool_backward<T, PoolKind::Max>(in[0], in[1], a, out);
  });
}

void avg_pool_backward_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tv) {
    using T = decltype(tv);
    if constexpr (!std::is_integral_v<T>) pool_backward<T, PoolKind::Avg>(in[0], in[0], a, out);
  });
}

// ---- derivatives ---------------------------------------------------------------------------

// max_pool2d: each window's gradient goes to its first largest element (one pass, no indices
// kept: the backward finds them again, which costs one read of x).
Grads max_pool_vjp(const VjpArgs& v) { return Grads{apply(OpId::MaxPool2dBackward, {v.in[0], v.grad}, v.attrs)}; }

// max_pool2d_backward is linear in the gradient: its transpose picks gg at each window's
// largest element of x. x only moves which element that is: no gradient.
Grads max_pool_backward_vjp(const VjpArgs& v) {
  if (!v.needs_grad(1)) return Grads{Tensor(), Tensor()};
  Tensor idx = apply(OpId::MaxPool2dIndices, {v.in[0]}, v.attrs);
  Tensor flat = gather(v.grad.flatten(-2), -1, idx.flatten(-2));
  return Grads{Tensor(), flat.reshape(idx.shape())};
}

Attrs avg_attrs(const Attrs& a, const Dims& in_shape) {
  Attrs b;
  b.kernel = a.kernel, b.stride = a.stride, b.padding = a.padding;
  b.count_include_pad = a.count_include_pad;
  b.shape = in_shape;
  return b;
}

// avg_pool2d is linear: its vjp is its transpose, avg_pool2d_backward, whose vjp is
// avg_pool2d again.
Grads avg_pool_vjp(const VjpArgs& v) {
  return Grads{apply(OpId::AvgPool2dBackward, {v.grad}, avg_attrs(v.attrs, v.in_types[0].shape))};
}
Grads avg_pool_backward_vjp(const VjpArgs& v) {
  return Grads{apply(OpId::AvgPool2d, {v.grad}, avg_attrs(v.attrs, {}))};
}

constexpr uint32_t kMaxPoolAttrs = kAttrKernel | kAttrStride | kAttrPadding | kAttrCeilMode;
constexpr uint32_t kAvgPoolAttrs = kAttrKernel | kAttrStride | kAttrPadding | kAttrCountIncludePad;

}  // namespace

// max_pool2d(x): window max over attrs.kernel (stride, padding, ceil_mode); NaN wins.
namespace {
// Each pooled element reads its window: per output element forward, per gradient element back.
double pool_flops(std::span<const TensorType>, const TensorType& out, const Attrs& a) {
  return static_cast<double>(out.shape.product()) * static_cast<double>(a.kernel[0] * a.kernel[1]);
}
double pool_backward_flops(std::span<const TensorType> in, const TensorType&, const Attrs& a) {
  return static_cast<double>(in.back().shape.product()) * static_cast<double>(a.kernel[0] * a.kernel[1]);
}
}  // namespace

const OpDef defs::MaxPool2d{.infer = pool_rule,
                            .cpu = pool_cpu<PoolKind::Max>,
                            .vjp = max_pool_vjp,
                            .saves = kSaveInputs,
                            .attrs = kMaxPoolAttrs,
                            .flops = pool_flops};
// max_pool2d_indices(x): i64 position (y * W + x in its plane) of the element max_pool2d picks
// in each window: the first largest, or the first NaN.
const OpDef defs::MaxPool2dIndices{.infer = pool_rule,
                                   .cpu = pool_cpu<PoolKind::Indices>,
                                   .differentiable = false,
                                   .saves = kSaveNothing,
                                   .attrs = kMaxPoolAttrs,
                                   .flops = pool_flops};
// max_pool2d_backward(x, grad): zeros of x's type with each window's gradient added at the
// element max_pool2d(x) picked there.
const OpDef defs::MaxPool2dBackward{.infer = max_pool_backward_rule,
                                    .cpu = max_pool_backward_cpu,
                                    .vjp = max_pool_backward_vjp,
                                    .attrs = kMaxPoolAttrs,
                                    .flops = pool_backward_flops};
// avg_pool2d(x): window mean over attrs.kernel (stride, padding, count_include_pad).
const OpDef defs::AvgPool2d{.infer = pool_rule,
                            .cpu = pool_cpu<PoolKind::Avg>,
                            .vjp = avg_pool_vjp,
                            .saves = kSaveNothing,
                            .attrs = kAvgPoolAttrs,
                            .flops = pool_flops};
// avg_pool2d_backward(grad): zeros of shape attrs.shape (avg_pool2d's input) with each
// window's gradient over its divisor added to the window's elements.
const OpDef defs::AvgPool2dBackward{.infer = avg_pool_backward_rule,
                                    .cpu = avg_pool_backward_cpu,
                                    .vjp = avg_pool_backward_vjp,
                                    .saves = kSaveNothing,
                                    .attrs = kAvgPoolAttrs | kAttrShape,
                                    .flops = pool_backward_flops};

namespace {
Tensor pool(OpId id, const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding, bool flag) {
  Attrs a;
  a.kernel = kernel;
  a.stride = stride.empty() ? kernel : stride;
  a.padding = padding;
  if (id == OpId::AvgPool2d) a.count_include_pad = flag;
  else a.ceil_mode = flag;
  return apply(id, {x}, a);
}
}  // namespace

// When a gradient will be taken, the forward keeps each window's argmax: the values are a
// gather at max_pool2d_indices, so the backward is gather's, one scatter through the indices
// (no second pass over x). Without one it is the plain max_pool2d op, which stores no indices.
Tensor max_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding, bool ceil_mode) {
  KILN_CHECK(x.defined(), "max_pool2d: the input is an undefined tensor");
  if (!(grad_enabled() && x.requires_grad())) return pool(OpId::MaxPool2d, x, kernel, stride, padding, ceil_mode);
  Tensor idx = pool(OpId::MaxPool2dIndices, x, kernel, stride, padding, ceil_mode);
  Tensor rows = x.flatten(-2);  // one statement each: the traced graph's order is fixed
  Tensor where_max = idx.flatten(-2);
  return gather(rows, -1, where_max).reshape(idx.shape());
}
Tensor avg_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding,
                  bool count_include_pad) {
  return pool(OpId::AvgPool2d, x, kernel, stride, padding, count_include_pad);
}

}  // namespace kiln
