// runtime/ops/conv.cpp -- conv2d (im2col + BLAS), max_pool2d and avg_pool2d, NCHW.
#include <cblas.h>

#include <cmath>
#include <limits>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;  // the last window must start inside the input
  return o;
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
  KILN_CHECK(w.shape()[1] * g == x.shape()[1], "conv2d: weight {} expects {} input channels, input {} has {}",
             w.type().str(), w.shape()[1] * g, x.type().str(), x.shape()[1]);
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

TensorType pool_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const char* op = op_name(id);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, "{}: expected input [N,C,H,W] or [C,H,W], got {}", op, x.type().str());
  KILN_CHECK(is_float(x.dtype()), "{}: expected a float input, got {}", op, x.type().str());
  check_pair(a.shape, "kernel size", op, 1);
  check_pair(a.stride, "stride", op, 1);
  check_pair(a.padding, "padding", op, 0);
  KILN_CHECK(a.padding[0] * 2 <= a.shape[0] && a.padding[1] * 2 <= a.shape[1],
             "{}: padding {} must be at most half the kernel size {}", op, shape_str(a.padding), shape_str(a.shape));
  bool ceil_mode = id == OpId::MaxPool2d && a.flag;
  int64_t r = x.dim();
  int64_t oh = out_size(x.shape()[r - 2], a.shape[0], a.stride[0], a.padding[0], 1, ceil_mode);
  int64_t ow = out_size(x.shape()[r - 1], a.shape[1], a.stride[1], a.padding[1], 1, ceil_mode);
  KILN_CHECK(oh > 0 && ow > 0, "{}: kernel {} is larger than padded input {}", op, shape_str(a.shape), x.type().str());
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
  bool include_pad = a.flag;
  parallel_for(0, planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(oh * ow * a.shape[0] * a.shape[1], 1)),
               [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t y0 = oy * a.stride[0] - a.padding[0], x0 = ox * a.stride[1] - a.padding[1];
          int64_t y1 = std::min(y0 + a.shape[0], h + a.padding[0]), x1 = std::min(x0 + a.shape[1], w + a.padding[1]);
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

}  // namespace

// conv2d(x, weight): 2-d cross-correlation, NCHW; attrs stride, padding, dilation, groups.
const OpDef defs::Conv2d{.infer = conv2d_rule, .cpu = conv2d_cpu};
// max_pool2d(x): window max; attrs.shape is the kernel, attrs.flag ceil_mode; NaN wins.
const OpDef defs::MaxPool2d{.infer = pool_rule, .cpu = pool_cpu<true>};
// avg_pool2d(x): window mean; attrs.flag is count_include_pad.
const OpDef defs::AvgPool2d{.infer = pool_rule, .cpu = pool_cpu<false>};

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
  a.shape = kernel;
  a.stride = stride.empty() ? kernel : stride;
  a.padding = padding;
  a.flag = flag;
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
