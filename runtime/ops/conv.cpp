// runtime/ops/conv.cpp -- conv2d (im2col + BLAS), NCHW.
#include <cblas.h>

#include <cmath>
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/ops/vjp_util.h"
#include "runtime/ops/window.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

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

}  // namespace

// conv2d(x, weight): 2-d cross-correlation, NCHW; attrs stride, padding, dilation, groups.
const OpDef defs::Conv2d{.infer = conv2d_rule, .cpu = conv2d_cpu, .vjp = conv2d_vjp,
                         .attrs = kAttrStride | kAttrPadding | kAttrDilation | kAttrGroups};

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

}  // namespace kiln
