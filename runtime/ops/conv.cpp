// runtime/ops/conv.cpp -- conv2d and its two gradient ops, NCHW: f32 through oneDNN when kiln
// has it (conv_onednn.h), else and for f64 by kiln's own kernels (im2col + GEMM, direct
// depthwise loops).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/ops/conv_onednn.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/im2col.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/vjp_util.h"
#include "runtime/ops/window.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

// conv2d's output type from its operands' types (also checks the gradient ops' shapes).
TensorType conv2d_type(const TensorType& x, const TensorType& w, const Attrs& a, const char* op) {
  KILN_CHECK(x.shape.size() == 4 && w.shape.size() == 4,
             "{}: expected input [N,C,H,W] and weight [O,C/groups,kH,kW], got {} and {}", op, x.str(), w.str());
  KILN_CHECK(x.dtype == w.dtype && is_float(x.dtype), "{}: input and weight must share a float dtype, got {} and {}",
             op, x.str(), w.str());
  for (int64_t d : x.shape) KILN_CHECK(d >= 0, "{}: input {} needs concrete sizes", op, x.str());
  for (int64_t d : w.shape) KILN_CHECK(d >= 0, "{}: weight {} needs concrete sizes", op, w.str());
  check_pair(a.stride, "stride", op, 1);
  check_pair(a.padding, "padding", op, 0);
  check_pair(a.dilation, "dilation", op, 1);
  int64_t g = a.groups;
  KILN_CHECK(g >= 1 && x.shape[1] % g == 0 && w.shape[0] % g == 0,
             "{}: groups {} must divide input channels {} and output channels {}", op, g, x.shape[1], w.shape[0]);
  KILN_CHECK(w.shape[1] == x.shape[1] / g,
             "{}: weight {} expects {} input channels per group, input {} has {} ({} groups)", op, w.str(), w.shape[1],
             x.str(), x.shape[1] / g, g);
  KILN_CHECK(w.shape[2] >= 1 && w.shape[3] >= 1, "{}: weight {} has an empty kernel", op, w.str());
  int64_t oh = out_size(x.shape[2], w.shape[2], a.stride[0], a.padding[0], a.dilation[0], false);
  int64_t ow = out_size(x.shape[3], w.shape[3], a.stride[1], a.padding[1], a.dilation[1], false);
  KILN_CHECK(oh > 0 && ow > 0, "{}: kernel {} (dilation {}) is larger than padded input {}", op,
             shape_str({w.shape[2], w.shape[3]}), shape_str(a.dilation), x.str());
  return {x.dtype, {x.shape[0], w.shape[0], oh, ow}, x.device};
}

TensorType conv2d_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  return conv2d_type(in[0].type(), in[1].type(), a, "conv2d");
}

// The gradient ops name the shape they produce in attrs.shape; the gradient they take must be
// what conv2d makes of it.
TensorType grad_target(const Attrs& a, DType t, Device dev, const char* op, const char* what) {
  KILN_CHECK(a.shape.size() == 4, "{}: shape must give the {} (4 dims), got {}", op, what, shape_str(a.shape));
  return {t, a.shape, dev};
}
void check_grad_shape(const TensorType& conv_out, const Tensor& grad, const char* op) {
  KILN_CHECK(grad.shape() == conv_out.shape && grad.dtype() == conv_out.dtype,
             "{}: gradient {} does not match the convolution's output {}", op, grad.type().str(), conv_out.str());
}

TensorType input_grad_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &g = in[0], &w = in[1];
  TensorType x = grad_target(a, w.dtype(), w.device(), "conv2d_input_grad", "input");
  check_grad_shape(conv2d_type(x, w.type(), a, "conv2d_input_grad"), g, "conv2d_input_grad");
  return x;
}

TensorType weight_grad_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &g = in[1];
  TensorType w = grad_target(a, x.dtype(), x.device(), "conv2d_weight_grad", "weight");
  check_grad_shape(conv2d_type(x.type(), w, a, "conv2d_weight_grad"), g, "conv2d_weight_grad");
  return w;
}

// ---- conv2d and its gradients: per image and group, im2col + one GEMM (1x1: the input is its
// own column matrix); depthwise by direct loops. Work splits over images and groups when there
// are enough of them, else inside each one (im2col rows, GEMM rows, col2im channels), so a
// single image uses every core. --------------------------------------------------------------

// Sizes of one convolution: x [n, c, h, w], weight [o, cg, kh, kw], `groups` groups.
struct ConvShape {
  int64_t n, c, o, groups, cg, og;
  conv::Geometry geo;                           // one group's
  int64_t k() const { return geo.rows(); }      // weight row length: cg * kh * kw
  int64_t p() const { return geo.pixels(); }    // output pixels per plane
  int64_t hw() const { return geo.h * geo.w; }  // input pixels per plane
  int64_t items() const { return n * groups; }
  bool depthwise() const { return cg == 1 && !geo.is_pointwise(); }
};

ConvShape conv_shape(const Dims& x, const Dims& w, const Attrs& a) {
  ConvShape s;
  s.n = x[0], s.c = x[1], s.o = w[0], s.groups = a.groups, s.cg = w[1], s.og = w[0] / a.groups;
  s.geo = {s.cg,
           x[2],
           x[3],
           w[2],
           w[3],
           a.stride[0],
           a.stride[1],
           a.padding[0],
           a.padding[1],
           a.dilation[0],
           a.dilation[1],
           out_size(x[2], w[2], a.stride[0], a.padding[0], a.dilation[0], false),
           out_size(x[3], w[3], a.stride[1], a.padding[1], a.dilation[1], false)};
  return s;
}

// The problem as oneDNN takes it (f32 only).
conv::Problem onednn_problem(const ConvShape& s) { return {s.n, s.c, s.o, s.groups, s.geo}; }

// Whether the images and groups alone keep every thread busy (then each one runs serially).
bool split_items(const ConvShape& s) { return s.items() >= num_threads(); }

template <class T> using Mat = gemm::Mat<T>;

// The column matrix [k, p] of item (image b, group gi): the input itself for a 1x1 kernel,
// else im2col into `buf` (rows split over threads when `parallel`).
template <class T>
const T* columns(const ConvShape& s, const T* x, int64_t b, int64_t gi, std::vector<T>& buf, bool parallel) {
  const T* plane = x + (b * s.c + gi * s.cg) * s.hw();
  if (s.geo.is_pointwise()) return plane;
  buf.resize(static_cast<size_t>(s.k() * s.p()));
  if (!parallel) {
    conv::im2col(s.geo, plane, buf.data(), 0, s.k());
  } else {
    parallel_for(0, s.k(), std::max<int64_t>(1, kParallelGrain / s.p()),
                 [&](int64_t r0, int64_t r1) { conv::im2col(s.geo, plane, buf.data(), r0, r1); });
  }
  return buf.data();
}

// Runs fn(item, parallel_inside) over every (image, group): items in parallel when there are
// enough, else one after another with each free to split its own work.
template <class F> void for_each_item(const ConvShape& s, F&& fn) {
  if (split_items(s)) {
    parallel_for(0, s.items(), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) fn(i, false);
    });
  } else {
    for (int64_t i = 0; i < s.items(); ++i) fn(i, true);
  }
}

// Output columns one BLAS call computes: about kColumnBlock, the columns split evenly (in
// multiples of 16). Set by the shape alone, so the calls (and so the bits of every result)
// never depend on the thread count; the blocks run in parallel.
constexpr int64_t kColumnBlock = 256;

// c = a @ b (+= when accumulate) in column blocks, on every thread unless already inside a
// parallel region.
template <class T> void product(Mat<const T> a, Mat<const T> b, Mat<T> c, bool accumulate = false) {
  int64_t blocks = std::max<int64_t>(1, (c.cols + kColumnBlock - 1) / kColumnBlock);
  int64_t width = ((c.cols + blocks - 1) / blocks + 15) / 16 * 16;
  blocks = (c.cols + width - 1) / width;
  int64_t block_work = c.rows * a.cols * width;
  parallel_for(0, blocks, std::max<int64_t>(1, gemm::kGemmParallelWork / std::max<int64_t>(block_work, 1)),
               [&](int64_t b0, int64_t b1) {
                 for (int64_t blk = b0; blk < b1; ++blk) {
                   int64_t j0 = blk * width, nj = std::min(width, c.cols - j0);
                   gemm::gemm(a, b.block(0, b.rows, j0, nj), c.block(0, c.rows, j0, nj), accumulate);
                 }
               });
}

// out[b, gi] [og, p] = W_g [og, k] @ cols [k, p].
template <class T> void conv_forward(const ConvShape& s, const T* x, const T* w, T* out) {
  if constexpr (std::is_same_v<T, float>)
    if (conv::onednn_forward(onednn_problem(s), x, w, out)) return;
  if (s.depthwise()) {
    parallel_for(0, s.n * s.o, std::max<int64_t>(1, kParallelGrain / (s.p() * s.k())), [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        int64_t b = q / s.o, o = q % s.o;
        conv::depthwise_plane(s.geo, x + (b * s.c + o / s.og) * s.hw(), w + o * s.k(), out + q * s.p());
      }
    });
    return;
  }
  for_each_item(s, [&](int64_t i, bool parallel) {
    int64_t b = i / s.groups, gi = i % s.groups;
    std::vector<T> buf;
    const T* cols = columns(s, x, b, gi, buf, parallel);
    product<T>({w + gi * s.og * s.k(), s.og, s.k(), s.k(), 1}, {cols, s.k(), s.p(), s.p(), 1},
               {out + (b * s.o + gi * s.og) * s.p(), s.og, s.p(), s.p(), 1});
  });
}

// With stride 1 the input gradient is itself a convolution: of g, with each group's kernel
// flipped and its input and output channels swapped, padded by d (k - 1) - p (which must not
// be negative). Run as conv_forward, its GEMM's inner dim is og k^2 instead of og, and no
// col2im follows; no FLOP is wasted (with a stride, zeros would have to be inserted, so
// col2im is used then).
bool input_grad_is_conv(const ConvShape& s) {
  const conv::Geometry& g = s.geo;
  return g.sh == 1 && g.sw == 1 && g.dh * (g.kh - 1) >= g.ph && g.dw * (g.kw - 1) >= g.pw && !g.is_pointwise() &&
         !s.depthwise();
}

template <class T> void conv_input_grad_as_conv(const ConvShape& s, const T* g, const T* w, T* dx) {
  const conv::Geometry& e = s.geo;
  int64_t kk = e.kh * e.kw;
  std::vector<T> flipped(static_cast<size_t>(s.o * s.k()));  // [c, og, kh, kw]
  for (int64_t gi = 0; gi < s.groups; ++gi)
    for (int64_t o = 0; o < s.og; ++o)
      for (int64_t ci = 0; ci < s.cg; ++ci)
        for (int64_t q = 0; q < kk; ++q)
          flipped[((gi * s.cg + ci) * s.og + o) * kk + (kk - 1 - q)] = w[((gi * s.og + o) * s.cg + ci) * kk + q];
  ConvShape t{
      s.n,
      s.o,
      s.c,
      s.groups,
      s.og,
      s.cg,
      {s.og, e.oh, e.ow, e.kh, e.kw, 1, 1, e.dh * (e.kh - 1) - e.ph, e.dw * (e.kw - 1) - e.pw, e.dh, e.dw, e.h, e.w}};
  conv_forward(t, g, flipped.data(), dx);
}

// dx[b, gi] = col2im(W_g^T [k, og] @ g[b, gi] [og, p]); a 1x1 kernel writes the product directly.
template <class T> void conv_input_grad(const ConvShape& s, const T* g, const T* w, T* dx) {
  if constexpr (std::is_same_v<T, float>)
    if (conv::onednn_input_grad(onednn_problem(s), g, w, dx)) return;
  if (input_grad_is_conv(s)) return conv_input_grad_as_conv(s, g, w, dx);
  std::fill(dx, dx + s.n * s.c * s.hw(), T(0));
  if (s.depthwise()) {
    parallel_for(
        0, s.n * s.c, std::max<int64_t>(1, kParallelGrain / (s.og * s.p() * s.k())), [&](int64_t q0, int64_t q1) {
          for (int64_t q = q0; q < q1; ++q) {
            int64_t b = q / s.c, ci = q % s.c;
            for (int64_t o = ci * s.og; o < (ci + 1) * s.og; ++o)
              conv::depthwise_input_grad_plane(s.geo, g + (b * s.o + o) * s.p(), w + o * s.k(), dx + q * s.hw());
          }
        });
    return;
  }
  for_each_item(s, [&](int64_t i, bool parallel) {
    int64_t b = i / s.groups, gi = i % s.groups;
    Mat<const T> wt = Mat<const T>{w + gi * s.og * s.k(), s.og, s.k(), s.k(), 1}.transposed();
    Mat<const T> gm{g + (b * s.o + gi * s.og) * s.p(), s.og, s.p(), s.p(), 1};
    T* dxi = dx + (b * s.c + gi * s.cg) * s.hw();
    if (s.geo.is_pointwise()) return product<T>(wt, gm, {dxi, s.k(), s.p(), s.p(), 1});
    std::vector<T> cols(static_cast<size_t>(s.k() * s.p()));
    product<T>(wt, gm, {cols.data(), s.k(), s.p(), s.p(), 1});
    if (!parallel) return conv::col2im(s.geo, cols.data(), dxi, 0, s.cg);
    parallel_for(0, s.cg, std::max<int64_t>(1, kParallelGrain / (s.k() / s.cg * s.p())),
                 [&](int64_t c0, int64_t c1) { conv::col2im(s.geo, cols.data(), dxi, c0, c1); });
  });
}

// The weight gradient sums over images and pixels. It is cut into partial sums by the shape
// alone: blocks of kImagesPerPartial images, or for small batches runs of kPixelRun pixels
// (each summed over the images); each partial is one thread's, and the partials are added in
// order. So the bits never depend on the thread count.
constexpr int64_t kImagesPerPartial = 4;
constexpr int64_t kPixelRun = 1024;

// dw_g [og, k] = sum over images b of g[b, gi] [og, p] @ cols(b, gi)^T [p, k].
template <class T> void conv_weight_grad(const ConvShape& s, const T* x, const T* g, T* dw) {
  if constexpr (std::is_same_v<T, float>)
    if (conv::onednn_weight_grad(onednn_problem(s), x, g, dw)) return;
  int64_t wsize = s.o * s.k();
  if (s.depthwise()) {
    std::fill(dw, dw + wsize, T(0));
    parallel_for(0, s.o, std::max<int64_t>(1, kParallelGrain / (s.n * s.p() * s.k())), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        for (int64_t b = 0; b < s.n; ++b)
          conv::depthwise_weight_grad_plane(s.geo, x + (b * s.c + o / s.og) * s.hw(), g + (b * s.o + o) * s.p(),
                                            dw + o * s.k());
    });
    return;
  }
  if (s.n == 0) return std::fill(dw, dw + wsize, T(0));
  // g[b, group gi] columns [p0, p1) times the same columns of its column matrix, into acc.
  auto add_product = [&](int64_t b, int64_t gi, const T* cols, int64_t p0, int64_t p1, T* acc, bool accumulate) {
    gemm::gemm<T>({g + (b * s.o + gi * s.og) * s.p() + p0, s.og, p1 - p0, s.p(), 1},
                  Mat<const T>{cols + p0, s.k(), p1 - p0, s.p(), 1}.transposed(),
                  {acc + gi * s.og * s.k(), s.og, s.k(), s.k(), 1}, accumulate);
  };
  std::vector<T> partials;
  int64_t parts;
  if (s.n > kImagesPerPartial) {
    parts = (s.n + kImagesPerPartial - 1) / kImagesPerPartial;
    partials.resize(static_cast<size_t>(parts * wsize));
    parallel_for(0, parts, 1, [&](int64_t k0, int64_t k1) {
      std::vector<T> buf;
      for (int64_t k = k0; k < k1; ++k) {
        int64_t b0 = k * kImagesPerPartial, b1 = std::min(s.n, b0 + kImagesPerPartial);
        for (int64_t b = b0; b < b1; ++b)
          for (int64_t gi = 0; gi < s.groups; ++gi)
            add_product(b, gi, columns(s, x, b, gi, buf, false), 0, s.p(), partials.data() + k * wsize, b > b0);
      }
    });
  } else {
    // Run r's partial sums its pixels over the images, in image order.
    int64_t runs = (s.p() + kPixelRun - 1) / kPixelRun;
    parts = runs;
    partials.resize(static_cast<size_t>(parts * wsize));
    std::vector<T> buf;
    for (int64_t b = 0; b < s.n; ++b)
      for (int64_t gi = 0; gi < s.groups; ++gi) {
        const T* cols = columns(s, x, b, gi, buf, true);
        parallel_for(0, runs, 1, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            add_product(b, gi, cols, r * kPixelRun, std::min(s.p(), (r + 1) * kPixelRun), partials.data() + r * wsize,
                        b > 0);
        });
      }
  }
  parallel_for(0, wsize, std::max<int64_t>(1, kParallelGrain / parts), [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      T sum = partials[e];
      for (int64_t k = 1; k < parts; ++k) sum += partials[k * wsize + e];
      dw[e] = sum;
    }
  });
}

// Runs `kernel` on contiguous operands of a compute dtype: f32 and f64 as they are, f16 and
// bf16 through f32.
template <class Kernel> void run_float(DType t, const Tensor& a, const Tensor& b, const Tensor& out, Kernel&& kernel) {
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    DType ct = std::is_same_v<T, float> ? DType::F32 : DType::F64;
    Tensor ac = a.to(ct).contiguous(), bc = b.to(ct).contiguous();
    Tensor oc = out.dtype() == ct ? out : Tensor::empty({ct, out.shape(), out.device()});
    kernel(static_cast<const T*>(ac.data_ptr()), static_cast<const T*>(bc.data_ptr()), static_cast<T*>(oc.data_ptr()));
    if (oc.impl() != out.impl()) copy_into(oc, out);
  };
  if (t == DType::F64) typed(double{});
  else typed(float{});
}

void conv2d_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  ConvShape s = conv_shape(in[0].shape(), in[1].shape(), a);
  run_float(out.dtype(), in[0], in[1], out, [&](auto x, auto w, auto o) { conv_forward(s, x, w, o); });
}

void input_grad_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  ConvShape s = conv_shape(a.shape, in[1].shape(), a);
  run_float(out.dtype(), in[0], in[1], out, [&](auto g, auto w, auto dx) { conv_input_grad(s, g, w, dx); });
}

void weight_grad_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  ConvShape s = conv_shape(in[0].shape(), a.shape, a);
  run_float(out.dtype(), in[0], in[1], out, [&](auto x, auto g, auto dw) { conv_weight_grad(s, x, g, dw); });
}

// ---- derivatives -------------------------------------------------------------------------

// conv2d's derivatives are the two gradient ops, whose own derivatives are conv2d and each
// other: every order of derivative exists.
Attrs with_shape(const Attrs& a, const Dims& shape) {
  Attrs c = a;
  c.shape = shape;
  return c;
}

Grads conv2d_vjp(const VjpArgs& v) {
  const Tensor &x = v.in[0], &w = v.in[1];
  Tensor gx, gw;
  if (v.needs_grad(0)) gx = apply(OpId::Conv2dInputGrad, {v.grad, w}, with_shape(v.attrs, x.shape()));
  if (v.needs_grad(1)) gw = apply(OpId::Conv2dWeightGrad, {x, v.grad}, with_shape(v.attrs, w.shape()));
  return Grads{gx, gw};
}

// conv2d_input_grad(g, w) is linear in each operand: d/dg is conv2d(G, w), d/dw the weight
// gradient of a convolution of G giving g.
Grads input_grad_vjp(const VjpArgs& v) {
  const Tensor &g = v.in[0], &w = v.in[1];
  Tensor gg, gw;
  if (v.needs_grad(0)) gg = apply(OpId::Conv2d, {v.grad, w}, with_shape(v.attrs, {}));
  if (v.needs_grad(1)) gw = apply(OpId::Conv2dWeightGrad, {v.grad, g}, with_shape(v.attrs, w.shape()));
  return Grads{gg, gw};
}

// conv2d_weight_grad(x, g): d/dx is the input gradient of g through W, d/dg is conv2d(x, W).
Grads weight_grad_vjp(const VjpArgs& v) {
  const Tensor &x = v.in[0], &g = v.in[1];
  Tensor gx, gg;
  if (v.needs_grad(0)) gx = apply(OpId::Conv2dInputGrad, {g, v.grad}, with_shape(v.attrs, x.shape()));
  if (v.needs_grad(1)) gg = apply(OpId::Conv2d, {x, v.grad}, with_shape(v.attrs, {}));
  return Grads{gx, gg};
}

}  // namespace

// conv2d(x, weight): 2-d cross-correlation, NCHW; attrs stride, padding, dilation, groups.
namespace {
// A weight [out, in / groups, kh, kw]'s multiply-adds per output element.
double conv_window(const Dims& w) { return static_cast<double>(w[1] * w[2] * w[3]); }
double conv2d_flops(std::span<const TensorType> in, const TensorType& out, const Attrs&) {
  return 2.0 * static_cast<double>(out.shape.product()) * conv_window(in[1].shape);
}
// (g, w): each element of the output gradient reaches a window of the input.
double input_grad_flops(std::span<const TensorType> in, const TensorType&, const Attrs&) {
  return 2.0 * static_cast<double>(in[0].shape.product()) * conv_window(in[1].shape);
}
// (x, g) -> the weight's shape: each element of the output gradient meets a window of x.
double weight_grad_flops(std::span<const TensorType> in, const TensorType& out, const Attrs&) {
  return 2.0 * static_cast<double>(in[1].shape.product()) * conv_window(out.shape);
}
}  // namespace

const OpDef defs::Conv2d{.infer = conv2d_rule,
                         .cpu = conv2d_cpu,
                         .vjp = conv2d_vjp,
                         .attrs = kAttrStride | kAttrPadding | kAttrDilation | kAttrGroups,
                         .flops = conv2d_flops};
// conv2d_input_grad(g, weight): conv2d's gradient with respect to its input, of attrs.shape (a
// transposed convolution: GEMM, then col2im; with stride 1, a convolution of g); conv2d's attrs
// otherwise.
const OpDef defs::Conv2dInputGrad{.infer = input_grad_rule,
                                  .cpu = input_grad_cpu,
                                  .vjp = input_grad_vjp,
                                  .attrs = kAttrStride | kAttrPadding | kAttrDilation | kAttrGroups | kAttrShape,
                                  .flops = input_grad_flops};
// conv2d_weight_grad(x, g): conv2d's gradient with respect to its weight, of attrs.shape.
const OpDef defs::Conv2dWeightGrad{.infer = weight_grad_rule,
                                   .cpu = weight_grad_cpu,
                                   .vjp = weight_grad_vjp,
                                   .attrs = kAttrStride | kAttrPadding | kAttrDilation | kAttrGroups | kAttrShape,
                                   .flops = weight_grad_flops};

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Dims& stride,
              const Dims& padding, const Dims& dilation, int64_t groups) {
  KILN_CHECK(x_in.defined() && weight_in.defined(), "conv2d: input and weight must be defined");
  Tensor x = autocast_low(x_in), weight = autocast_low(weight_in), bias = autocast_low(bias_in);  // runtime/autocast.h
  DType t = to_float_dtype(promote(x.dtype(), weight.dtype()));
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  a.dilation = dilation;
  a.groups = groups;
  Tensor y = apply(OpId::Conv2d, {x.to(t), weight.to(t)}, a);
  if (!bias.defined()) return y;
  KILN_CHECK(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], "conv2d: bias must be [{}], got {}",
             weight.shape()[0], bias.type().str());
  return y + bias.reshape({-1, 1, 1});
}

}  // namespace kiln
