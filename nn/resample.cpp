// nn/resample.cpp -- layers that change an image's size: adaptive_avg_pool2d, interpolate
// (nearest and bilinear) and conv_transpose2d, with their modules. Each is ops kiln has:
// pooling that divides evenly is avg_pool2d; anything else is a matrix per spatial dim
// (out = M_h x M_w^T, each row of M the weights one output reads), so every one differentiates,
// traces and runs on every device; conv_transpose2d is conv2d's input gradient.
#include <algorithm>
#include <cmath>

#include "nn/describe.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/op.h"

namespace kiln::nn {

namespace {

void check_image(const Tensor& x, const char* op) {
  KILN_CHECK(x.defined() && x.dim() == 4 && is_float(x.dtype()), "{}: expected a float input [N, C, H, W], got {}", op,
             type_of(x));
}

// An [out, in] matrix (f64 values, x's dtype and device) from row(i) -> (column, weight) pairs.
template <class Row> Tensor matrix(int64_t out, int64_t in, const Tensor& like, Row row) {
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  for (int64_t i = 0; i < out; ++i)
    for (auto [j, w] : row(i)) m[static_cast<size_t>(i * in + j)] += w;
  return from_vector(m, {out, in}).to(like.dtype()).to(like.device());
}

// x [N, C, H, W] with each spatial dim mapped by its matrix: [N, C, mh rows, mw rows].
Tensor apply_spatial(const Tensor& x, const Tensor& mh, const Tensor& mw) { return matmul(matmul(mh, x), mw.t()); }

// Adaptive pooling's window along a dim: [floor(i n / o), ceil((i + 1) n / o)).
std::vector<std::pair<int64_t, double>> adaptive_row(int64_t i, int64_t n, int64_t o) {
  int64_t start = (i * n) / o, end = ((i + 1) * n + o - 1) / o;
  std::vector<std::pair<int64_t, double>> r;
  for (int64_t j = start; j < end; ++j) r.emplace_back(j, 1.0 / static_cast<double>(end - start));
  return r;
}

// Where output i of a bilinear resize reads along a dim of n inputs (torch's source index).
std::vector<std::pair<int64_t, double>> bilinear_row(int64_t i, int64_t n, int64_t o, bool align_corners,
                                                     double scale) {
  double src;
  if (align_corners) {
    src = o > 1 ? static_cast<double>(i) * static_cast<double>(n - 1) / static_cast<double>(o - 1) : 0.0;
  } else {
    src = std::max((static_cast<double>(i) + 0.5) * scale - 0.5, 0.0);
  }
  int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), n - 1), i1 = std::min(i0 + 1, n - 1);
  double l = src - static_cast<double>(i0);
  return {{i0, 1.0 - l}, {i1, l}};
}

}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& x, const Dims& output_size) {
  check_image(x, "adaptive_avg_pool2d");
  KILN_CHECK(output_size.size() == 2 && output_size[0] > 0 && output_size[1] > 0,
             "adaptive_avg_pool2d: output_size must be two positive sizes, got {}", shape_str(output_size));
  int64_t h = x.shape()[2], w = x.shape()[3], oh = output_size[0], ow = output_size[1];
  KILN_CHECK(h > 0 && w > 0, "adaptive_avg_pool2d: empty image {}", x.type().str());
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
  if (h % oh == 0 && w % ow == 0) return avg_pool2d(x, {h / oh, w / ow}, {h / oh, w / ow});
  return apply_spatial(x, matrix(oh, h, x, [&](int64_t i) { return adaptive_row(i, h, oh); }),
                       matrix(ow, w, x, [&](int64_t i) { return adaptive_row(i, w, ow); }));
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  check_image(x, "interpolate");
  KILN_CHECK(o.size.empty() != o.scale_factor.empty(), "interpolate: give size or scale_factor, not both or neither");
  KILN_CHECK(o.mode == "nearest" || o.mode == "bilinear",
             "interpolate: mode must be \"nearest\" or \"bilinear\", got \"{}\"", o.mode);
  KILN_CHECK(!o.align_corners || o.mode == "bilinear", "interpolate: align_corners is for bilinear mode only");
  int64_t h = x.shape()[2], w = x.shape()[3];
  Dims out(2);
  double scale[2];  // input size over output size, as torch's source index reads it
  for (int d = 0; d < 2; ++d) {
    int64_t n = d == 0 ? h : w;
    if (!o.size.empty()) {
      KILN_CHECK(o.size.size() == 2 && o.size[0] > 0 && o.size[1] > 0,
                 "interpolate: size must be two positive sizes, got {}", shape_str(o.size));
      out[d] = o.size[d];
      scale[d] = static_cast<double>(n) / static_cast<double>(out[d]);
    } else {
      KILN_CHECK(o.scale_factor.size() == 2 && o.scale_factor[0] > 0 && o.scale_factor[1] > 0,
                 "interpolate: scale_factor must be two positive numbers");
      out[d] = static_cast<int64_t>(std::floor(static_cast<double>(n) * o.scale_factor[d]));
      scale[d] = 1.0 / o.scale_factor[d];  // torch uses the given factor (recompute_scale_factor unset)
    }
    KILN_CHECK(out[d] > 0, "interpolate: an output of size {} from {}", shape_str(out), x.type().str());
  }
  if (o.mode == "nearest") {
    // torch's index, in its f32 arithmetic: min(floor(i * (in / out)), in - 1).
    auto index = [&](int64_t n, int64_t len, double s) {
      std::vector<int64_t> idx;
      float fs = o.size.empty() ? static_cast<float>(s) : static_cast<float>(n) / static_cast<float>(len);
      for (int64_t i = 0; i < len; ++i)
        idx.push_back(len == n ? i : std::min(static_cast<int64_t>(std::floor(static_cast<float>(i) * fs)), n - 1));
      return from_vector(idx).to(x.device());
    };
    return index_select(index_select(x, 2, index(h, out[0], scale[0])), 3, index(w, out[1], scale[1]));
  }
  return apply_spatial(
      x, matrix(out[0], h, x, [&](int64_t i) { return bilinear_row(i, h, out[0], o.align_corners, scale[0]); }),
      matrix(out[1], w, x, [&](int64_t i) { return bilinear_row(i, w, out[1], o.align_corners, scale[1]); }));
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Dims& stride,
                        const Dims& padding, const Dims& output_padding, int64_t groups, const Dims& dilation) {
  check_image(x, "conv_transpose2d");
  KILN_CHECK(weight.defined() && weight.dim() == 4 && weight.shape()[0] == x.shape()[1] && groups > 0,
             "conv_transpose2d: weight must be [{}, out/groups, kh, kw] for input {}, got {}", x.shape()[1],
             x.type().str(), type_of(weight));
  for (const Dims* d : {&stride, &padding, &output_padding, &dilation})
    KILN_CHECK(d->size() == 2, "conv_transpose2d: stride, padding, output_padding and dilation take two sizes each");
  Dims shape{x.shape()[0], weight.shape()[1] * groups, 0, 0};
  for (int d = 0; d < 2; ++d) {
    KILN_CHECK(output_padding[d] >= 0 && (output_padding[d] < stride[d] || output_padding[d] < dilation[d]),
               "conv_transpose2d: output_padding {} must be smaller than the stride or the dilation",
               shape_str(output_padding));
    shape[2 + d] = (x.shape()[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (weight.shape()[2 + d] - 1) +
                   output_padding[d] + 1;
  }
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  a.dilation = dilation;
  a.groups = groups;
  a.shape = shape;
  Tensor xl = autocast_low(x), wl = autocast_low(weight);  // runtime/autocast.h
  DType t = promote(xl.dtype(), wl.dtype());
  Tensor y = apply(OpId::Conv2dInputGrad, {xl.to(t), wl.to(t)}, a);
  if (!bias.defined()) return y;
  KILN_CHECK(bias.dim() == 1 && bias.shape()[0] == shape[1], "conv_transpose2d: bias must be [{}], got {}", shape[1],
             bias.type().str());
  return y + autocast_low(bias).reshape({-1, 1, 1});
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Dims kernel, ConvTranspose2dOptions opt) : options(opt) {
  KILN_CHECK(kernel.size() == 2 && kernel[0] > 0 && kernel[1] > 0,
             "ConvTranspose2d: kernel must be two positive sizes, got {}", shape_str(kernel));
  KILN_CHECK(opt.groups > 0 && in % opt.groups == 0 && out % opt.groups == 0,
             "ConvTranspose2d: groups {} must divide in_channels {} and out_channels {}", opt.groups, in, out);
  weight = empty({in, out / opt.groups, kernel[0], kernel[1]});
  kaiming_uniform_(weight, std::sqrt(5.0));  // torch's default; fan_in is out/groups kh kw
  register_parameter("weight", weight);
  if (opt.bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fans(weight).first));
    bias = empty({out});
    uniform_(bias, -bound, bound);
    register_parameter("bias", bias);
  }
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, options.stride, options.padding, options.output_padding, options.groups,
                          options.dilation);
}

}  // namespace kiln::nn
