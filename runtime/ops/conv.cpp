// runtime/ops/conv.cpp -- conv2d (im2col + BLAS), max_pool2d and avg_pool2d, NCHW.
#include <cblas.h>

#include <cmath>
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/vjp_util.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

// In 128 bits: attributes read from IR text can be anything; a result past int64 is clamped
// (the shape check of the output rejects it).
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  using Wide = __int128;
  Wide span = Wide{in} + 2 * Wide{p} - Wide{d} * (Wide{k} - 1) - 1;
  if (span < 0) return 0;
  Wide o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= Wide{in} + p) --o;  // the last window must start inside the input
  return o > INT64_MAX ? INT64_MAX : static_cast<int64_t>(o);
}

void check_pair(const Dims& v, const char* what, const char* op, int64_t min) {
  KILN_CHECK(v.size() == 2 && v[0] >= min && v[1] >= min, "{}: {} must be two values >= {}, got {}",
             op, what, min, shape_str(v));
}

TensorType conv2d_rule(OpId, std::span<const Tensor> in, const Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  KILN_CHECK(x.dim() == 4 && w.dim() == 4, "conv2d: expected input [N,C,H,W] and weight [O,C/groups,kH,kW], got {} and {}",
             x.type().str(), w.type().str());
  KILN_CHECK(x.dtype() == w.dtype() && is_float(x.dtype()), "conv2d: input and weight must share a float dtype, got {} and {}",
             x.type().str(), w.type().str());
  check_pair(a.stride, "stride", "conv2d", 1);
  check_pair(a.padding, "padding", "conv2d", 0);
  check_pair(a.dilation, "dilation", "conv2d", 1);
  int64_t g = a.groups;
  KILN_CHECK(g >= 1 && x.shape()[1] % g == 0 && w.shape()[0] % g == 0,
             "conv2d: groups {} must divide input channels {} and output channels {}", g, x.shape()[1], w.shape()[0]);
  KILN_CHECK(w.shape()[1] == x.shape()[1] / g, "conv2d: weight {} expects {} input channels per group, input {} has {} ({} groups)",
             w.type().str(), w.shape()[1], x.type().str(), x.shape()[1] / g, g);
  int64_t oh = out_size(x.shape()[2], w.shape()[2], a.stride[0], a.padding[0], a.dilation[0], false);
  int64_t ow = out_size(x.shape()[3], w.shape()[3], a.stride[1], a.padding[1], a.dilation[1], false);
  KILN_CHECK(oh > 0 && ow > 0, "conv2d: kernel {} (dilation {}) is larger than padded input {}",
             shape_str({w.shape()[2], w.shape()[3]}), shape_str(a.dilation), x.type().str());
  return {x.dtype(), {x.shape()[0], w.shape()[0], oh, ow}, x.device()};
}

template <class T>
void conv2d_typed(const Tensor& x, const Tensor& w, const Attrs& a, const Tensor& out) {
  int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
  int64_t o = w.shape()[0], kh = w.shape()[2], kw = w.shape()[3], g = a.groups;
  int64_t oh = out.shape()[2], ow = out.shape()[3];
  int64_t cg = c / g, og = o / g, kk = cg * kh * kw, pix = oh * ow;
  const T* px = static_cast<const T*>(x.data_ptr());
  const T* pw = static_cast<const T*>(w.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  BlasThreadsScope one_blas_thread;  // BLAS runs inside our chunks, never beside them
  parallel_for(0, n * g, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> cols(static_cast<size_t>(kk * pix));
    for (int64_t bg = b0; bg < b1; ++bg) {
      int64_t b = bg / g, gi = bg % g;
      // im2col: row (ci, ky, kx), column (oy, ox); zero where the window leaves the input.
      for (int64_t ci = 0; ci < cg; ++ci)
        for (int64_t ky = 0; ky < kh; ++ky)
          for (int64_t kx = 0; kx < kw; ++kx) {
            T* row = cols.data() + ((ci * kh + ky) * kw + kx) * pix;
            const T* plane = px + (b * c + gi * cg + ci) * h * wd;
            for (int64_t oy = 0; oy < oh; ++oy) {
              int64_t iy = oy * a.stride[0] - a.padding[0] + ky * a.dilation[0];
              for (int64_t ox = 0; ox < ow; ++ox) {
                int64_t ix = ox * a.stride[1] - a.padding[1] + kx * a.dilation[1];
                row[oy * ow + ox] = (iy >= 0 && iy < h && ix >= 0 && ix < wd) ? plane[iy * wd + ix] : T(0);
              }
            }
          }
      const T* wg = pw + gi * og * kk;
      T* og_out = po + (b * o + gi * og) * pix;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(og), int(pix), int(kk), 1.0f, wg, int(kk), cols.data(), int(pix), 0.0f, og_out, int(pix));
      else
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(og), int(pix), int(kk), 1.0, wg, int(kk), cols.data(), int(pix), 0.0, og_out, int(pix));
    }
  });
}

void conv2d_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  DType t = out.dtype();
  if (t == DType::F32 || t == DType::F64) {
    Tensor x = in[0].contiguous(), w = in[1].contiguous();
    if (t == DType::F32) conv2d_typed<float>(x, w, a, out);
    else conv2d_typed<double>(x, w, a, out);
    return;
  }
  Tensor o32 = empty(out.shape(), DType::F32);  // f16/bf16 compute in f32
  conv2d_typed<float>(in[0].to(DType::F32).contiguous(), in[1].to(DType::F32).contiguous(), a, o32);
  copy_into(o32, out);
}

TensorType pool_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const char* op = op_name(id);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, "{}: expected input [N,C,H,W] or [C,H,W], got {}", op, x.type().str());
  KILN_CHECK(is_float(x.dtype()), "{}: expected a float input, got {}", op, x.type().str());
  check_pair(a.kernel, "kernel size", op, 1);
  check_pair(a.stride, "stride", op, 1);
  check_pair(a.padding, "padding", op, 0);
  KILN_CHECK(a.padding[0] <= a.kernel[0] / 2 && a.padding[1] <= a.kernel[1] / 2,
             "{}: padding {} must be at most half the kernel size {}", op, shape_str(a.padding), shape_str(a.kernel));
  bool ceil_mode = id == OpId::MaxPool2d && a.ceil_mode;
  int64_t r = x.dim();
  int64_t oh = out_size(x.shape()[r - 2], a.kernel[0], a.stride[0], a.padding[0], 1, ceil_mode);
  int64_t ow = out_size(x.shape()[r - 1], a.kernel[1], a.stride[1], a.padding[1], 1, ceil_mode);
  KILN_CHECK(oh > 0 && ow > 0, "{}: kernel {} is larger than padded input {}", op, shape_str(a.kernel), x.type().str());
  Dims shape = x.shape();
  shape[r - 2] = oh;
  shape[r - 1] = ow;
  return {x.dtype(), shape, x.device()};
}

template <bool kMax>
void pool_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  Tensor x = in[0].to(DType::F64).contiguous();
  int64_t r = x.dim(), h = x.shape()[r - 2], w = x.shape()[r - 1];
  int64_t oh = out.shape()[r - 2], ow = out.shape()[r - 1];
  int64_t planes = x.numel() / std::max<int64_t>(h * w, 1);
  Tensor o = empty(out.shape(), DType::F64);
  const double* px = x.data<double>();
  double* po = o.data<double>();
  bool include_pad = a.count_include_pad;
  parallel_for(0, planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(oh * ow * a.kernel[0] * a.kernel[1], 1)),
               [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t y0 = oy * a.stride[0] - a.padding[0], x0 = ox * a.stride[1] - a.padding[1];
          int64_t y1 = std::min(y0 + a.kernel[0], h + a.padding[0]), x1 = std::min(x0 + a.kernel[1], w + a.padding[1]);
          int64_t pool_size = (y1 - y0) * (x1 - x0);  // window clipped to the padded input
          double acc = kMax ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t y = std::max<int64_t>(y0, 0); y < std::min(y1, h); ++y)
            for (int64_t xx = std::max<int64_t>(x0, 0); xx < std::min(x1, w); ++xx) {
              double v = px[(p * h + y) * w + xx];
              if constexpr (kMax) acc = (v > acc || v != v) ? v : acc;
              else acc += v;
            }
          if constexpr (!kMax) {
            int64_t count = include_pad ? pool_size
                                        : (std::min(y1, h) - std::max<int64_t>(y0, 0)) * (std::min(x1, w) - std::max<int64_t>(x0, 0));
            acc /= double(std::max<int64_t>(count, 1));
          }
          po[(p * oh + oy) * ow + ox] = acc;
        }
  });
  copy_into(o, out);
}

// ---- derivatives, written with conv2d, pad, slice and index_select (so they differentiate
// again) ---------------------------------------------------------------------------------

// Inserts s - 1 zeros between the entries of dim `dim`.
Tensor dilate(const Tensor& t, int64_t dim, int64_t s) {
  if (s == 1) return t;
  int64_t m = t.shape()[dim];
  return slice_backward(t, [&] { Dims d = t.shape(); d[dim] = (m - 1) * s + 1; return d; }(), dim, 0, (m - 1) * s + 1, s);
}

Tensor flip(const Tensor& t, int64_t dim) {
  int64_t n = t.shape()[dim];
  return index_select(t, dim, arange(n - 1, -1, -1));
}

// d conv2d / d x for one group: a transposed convolution, as a convolution of the dilated,
// padded gradient with the flipped, transposed kernel.
Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Dims& in_shape, const Attrs& a) {
  Tensor gd = g;
  for (int d = 0; d < 2; ++d) gd = dilate(gd, 2 + d, a.stride[d]);
  Tensor wt = flip(flip(w, 2), 3).transpose(0, 1);
  Tensor gp = gd;
  for (int d = 0; d < 2; ++d) {
    int64_t k = a.dilation[d] * (w.shape()[2 + d] - 1);
    gp = pad_dim(gp, 2 + d, k, k);
  }
  Attrs c;
  c.stride = {1, 1};
  c.padding = {0, 0};
  c.dilation = a.dilation;
  c.groups = 1;
  Tensor full = apply(OpId::Conv2d, {gp, wt}, c);  // covers the padded input's first rows
  for (int d = 0; d < 2; ++d) {
    int64_t padded = in_shape[2 + d] + 2 * a.padding[d], covered = full.shape()[2 + d];
    full = pad_dim(full, 2 + d, -a.padding[d], padded - covered - a.padding[d]);
  }
  return full;
}

// d conv2d / d weight for one group: a convolution of the input with the gradient, batch and
// channels swapped, stride and dilation swapped.
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& g, const Dims& w_shape, const Attrs& a) {
  Attrs c;
  c.stride = a.dilation;
  c.dilation = a.stride;
  c.padding = a.padding;
  c.groups = 1;
  Tensor r = apply(OpId::Conv2d, {x.transpose(0, 1), g.transpose(0, 1)}, c);  // [C, O, >=kh, >=kw]
  return r.slice(2, 0, w_shape[2]).slice(3, 0, w_shape[3]).transpose(0, 1);
}

Grads conv2d_vjp(const VjpArgs& v) {
  const Tensor &x = v.in[0], &w = v.in[1];
  int64_t groups = v.attrs.groups, cg = x.shape()[1] / groups, og = w.shape()[0] / groups;
  std::vector<Tensor> gx, gw;
  for (int64_t i = 0; i < groups; ++i) {
    Tensor xi = x.slice(1, i * cg, (i + 1) * cg), wi = w.slice(0, i * og, (i + 1) * og);
    Tensor gi = v.grad.slice(1, i * og, (i + 1) * og);
    if (v.needs_grad(0)) gx.push_back(conv2d_input_grad(gi, wi, xi.shape(), v.attrs));
    if (v.needs_grad(1)) gw.push_back(conv2d_weight_grad(xi, gi, wi.shape(), v.attrs));
  }
  return Grads{gx.empty() ? Tensor() : cat(gx, 1), gw.empty() ? Tensor() : cat(gw, 0)};
}

// The windows of a pool as k*k strided slices of the (padded) input, each [.., oh, ow].
struct Windows {
  Tensor padded;               // input padded by `padding` (and at the end, for ceil_mode)
  std::vector<Tensor> slices;  // one per kernel position (ky, kx)
  Dims slice_start;            // per slice: (ky, kx) pairs
};

Windows windows(const Tensor& x, const Attrs& a, const Dims& out_shape, Scalar fill) {
  int64_t r = x.dim();
  Windows w;
  w.padded = x;
  for (int d = 0; d < 2; ++d) {
    int64_t in = x.shape()[r - 2 + d], o = out_shape[r - 2 + d];
    int64_t need = (o - 1) * a.stride[d] + a.kernel[d];
    int64_t extra = std::max<int64_t>(0, need - (in + 2 * a.padding[d]));
    Dims pads(static_cast<size_t>(2 * (2 - d)), 0);
    pads[pads.size() - 2] = a.padding[d];
    pads[pads.size() - 1] = a.padding[d] + extra;
    w.padded = pad(w.padded, pads, fill);
  }
  int64_t oh = out_shape[r - 2], ow = out_shape[r - 1];
  for (int64_t ky = 0; ky < a.kernel[0]; ++ky)
    for (int64_t kx = 0; kx < a.kernel[1]; ++kx) {
      w.slices.push_back(w.padded.slice(r - 2, ky, ky + (oh - 1) * a.stride[0] + 1, a.stride[0])
                             .slice(r - 1, kx, kx + (ow - 1) * a.stride[1] + 1, a.stride[1]));
      w.slice_start.push_back(ky);
      w.slice_start.push_back(kx);
    }
  return w;
}

// Scatters per-window gradients back onto the input: the sum of each slice's backward, with
// the padding cropped.
Tensor gather_windows(const std::vector<Tensor>& grads, const Windows& w, const Attrs& a, const Dims& in_shape) {
  int64_t r = static_cast<int64_t>(in_shape.size());
  Tensor acc;
  for (size_t k = 0; k < grads.size(); ++k) {
    int64_t ky = w.slice_start[2 * k], kx = w.slice_start[2 * k + 1];
    int64_t oh = grads[k].shape()[r - 2], ow = grads[k].shape()[r - 1];
    Dims rows = w.padded.shape();  // the shape between the two slices: rows taken, all columns
    rows[r - 2] = oh;
    Tensor gk = slice_backward(grads[k], rows, r - 1, kx, kx + (ow - 1) * a.stride[1] + 1, a.stride[1]);
    gk = slice_backward(gk, w.padded.shape(), r - 2, ky, ky + (oh - 1) * a.stride[0] + 1, a.stride[0]);
    acc = acc.defined() ? acc + gk : gk;
  }
  for (int d = 0; d < 2; ++d) {
    int64_t dim = r - 2 + d;
    acc = pad_dim(acc, dim, -a.padding[d], in_shape[dim] - acc.shape()[dim] + a.padding[d]);
  }
  return acc;
}

// max_pool2d: the first largest element of each window gets the window's gradient.
Grads max_pool_vjp(const VjpArgs& v) {
  const Tensor& x = v.in[0];
  Windows w = windows(x, v.attrs, v.out.shape(), -std::numeric_limits<double>::infinity());
  Tensor first = argmax(stack(w.slices, 0), 0);
  std::vector<Tensor> grads;
  for (size_t k = 0; k < w.slices.size(); ++k)
    grads.push_back(where(first == static_cast<int64_t>(k), v.grad, 0.0));
  return Grads{gather_windows(grads, w, v.attrs, x.shape())};
}

// avg_pool2d: each element of a window gets the window's gradient over its divisor.
Grads avg_pool_vjp(const VjpArgs& v) {
  const Dims& shape = v.in_types[0].shape;
  // Each window's divisor, as the forward counted it: with count_include_pad every window
  // spans the full kernel (avg_pool2d has no ceil_mode); otherwise only its input elements.
  Windows valid = windows(ones(shape, v.grad.dtype()), v.attrs, v.grad.shape(), 0.0);
  Tensor count;
  if (v.attrs.count_include_pad) {
    count = full({}, static_cast<double>(v.attrs.kernel[0] * v.attrs.kernel[1]), v.grad.dtype());
  } else {
    for (const Tensor& s : valid.slices) count = count.defined() ? count + s : s;
  }
  Tensor share = v.grad / count;
  std::vector<Tensor> grads(valid.slices.size(), share);
  return Grads{gather_windows(grads, valid, v.attrs, shape)};
}

}  // namespace

// conv2d(x, weight): 2-d cross-correlation, NCHW; attrs stride, padding, dilation, groups.
const OpDef defs::Conv2d{.infer = conv2d_rule, .cpu = conv2d_cpu, .vjp = conv2d_vjp,
                         .attrs = kAttrStride | kAttrPadding | kAttrDilation | kAttrGroups};
// max_pool2d(x): window max over attrs.kernel (stride, padding, ceil_mode); NaN wins.
const OpDef defs::MaxPool2d{.infer = pool_rule, .cpu = pool_cpu<true>, .vjp = max_pool_vjp, .saves = kSaveBoth,
                            .attrs = kAttrKernel | kAttrStride | kAttrPadding | kAttrCeilMode};
// avg_pool2d(x): window mean over attrs.kernel (stride, padding, count_include_pad).
const OpDef defs::AvgPool2d{.infer = pool_rule, .cpu = pool_cpu<false>, .vjp = avg_pool_vjp, .saves = kSaveNothing,
                            .attrs = kAttrKernel | kAttrStride | kAttrPadding | kAttrCountIncludePad};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Dims& stride,
              const Dims& padding, const Dims& dilation, int64_t groups) {
  KILN_CHECK(x.defined() && weight.defined(), "conv2d: input and weight must be defined");
  DType t = to_float_dtype(promote(x.dtype(), weight.dtype()));
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  a.dilation = dilation;
  a.groups = groups;
  Tensor y = apply(OpId::Conv2d, {x.to(t), weight.to(t)}, a);
  if (!bias.defined()) return y;
  KILN_CHECK(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0],
             "conv2d: bias must be [{}], got {}", weight.shape()[0], bias.type().str());
  return y + bias.reshape({-1, 1, 1});
}

namespace {
Tensor pool(OpId id, const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding, bool flag) {
  Attrs a;
  a.kernel = kernel;
  a.stride = stride.empty() ? kernel : stride;
  a.padding = padding;
  if (id == OpId::MaxPool2d) a.ceil_mode = flag;
  else a.count_include_pad = flag;
  return apply(id, {x}, a);
}
}  // namespace

Tensor max_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding, bool ceil_mode) {
  return pool(OpId::MaxPool2d, x, kernel, stride, padding, ceil_mode);
}
Tensor avg_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding, bool count_include_pad) {
  return pool(OpId::AvgPool2d, x, kernel, stride, padding, count_include_pad);
}

}  // namespace kiln
