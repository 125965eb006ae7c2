// runtime/ops/pool.cpp -- max_pool2d and avg_pool2d over the last two dims (NCHW or CHW).
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

// max_pool2d(x): window max over attrs.kernel (stride, padding, ceil_mode); NaN wins.
const OpDef defs::MaxPool2d{.infer = pool_rule, .cpu = pool_cpu<true>, .vjp = max_pool_vjp, .saves = kSaveBoth,
                            .attrs = kAttrKernel | kAttrStride | kAttrPadding | kAttrCeilMode};
// avg_pool2d(x): window mean over attrs.kernel (stride, padding, count_include_pad).
const OpDef defs::AvgPool2d{.infer = pool_rule, .cpu = pool_cpu<false>, .vjp = avg_pool_vjp, .saves = kSaveNothing,
                            .attrs = kAttrKernel | kAttrStride | kAttrPadding | kAttrCountIncludePad};

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
