// runtime/composite_ops.cpp -- ops written with other ops: they get autograd and tracing for free.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/composite_fusion.h"
#include "runtime/op.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"
#include "runtime/recorder.h"
#include "runtime/type_rules.h"

namespace kiln {

namespace {
// Number of elements each output of a reduction over `dims` combines.
int64_t reduced_count(const Tensor& x, const Dims& dims, const char* op) {
  int64_t n = 1;
  for (int64_t d : normalize_axes(dims, x.dim(), op)) n *= x.shape()[d];
  return n;
}
}  // namespace

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  KILN_CHECK(x.defined(), "mean: the tensor is undefined");
  Tensor xf = autocast_wide(x).to(to_float_dtype(x.dtype()));
  int64_t n = reduced_count(x, dims, "mean");
  return sum(xf, dims, keepdim) / static_cast<double>(n);
}

Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  KILN_CHECK(x.defined(), "var: the tensor is undefined");
  Tensor xf = autocast_wide(x).to(to_float_dtype(x.dtype()));
  int64_t n = reduced_count(x, dims, "var");
  Tensor centered = xf - mean(xf, dims, true);
  // Two passes (mean, then squared deviations) keep the result accurate for large means.
  return sum(centered * centered, dims, keepdim) / static_cast<double>(std::max<int64_t>(n - correction, 0));
}

Tensor std(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  KILN_CHECK(x.defined(), "std: the tensor is undefined");
  normalize_axes(dims, x.dim(), "std");  // so a bad dim is reported as std's, not var's
  return sqrt(var(x, dims, correction, keepdim));
}

namespace {

// Runs a shape-preserving composite `fn` that reduces only over the trailing `trailing` dims of
// x block by block over the leading rows, in parallel, so each block's temporaries stay in
// cache: every primitive pass then costs cache bandwidth, not memory bandwidth, and the eager
// composite reads x and writes its result about once. Only when nothing records the ops
// (`params` are the other tensors fn reads, for the autograd check).
template <class F>
Tensor by_row_blocks(const Tensor& x, int64_t trailing, F fn, std::initializer_list<Tensor> params = {}) {
  bool taped = grad_enabled() && x.requires_grad();
  for (const Tensor& p : params) taped = taped || (grad_enabled() && p.defined() && p.requires_grad());
  constexpr int64_t kBlockElems = 64 * 1024;  // elements per block's temporaries
  int64_t rows = 1;
  for (int64_t i = 0; i < x.dim() - trailing; ++i) rows *= x.shape()[i];
  int64_t row_elems = rows == 0 ? 0 : x.numel() / rows;
  if (taped || active_recorder() || in_parallel_region() || !x.device().is_cpu() || x.numel() < 4 * kBlockElems ||
      rows < 2 || row_elems > kBlockElems)
    return fn(x);
  int64_t block = std::max<int64_t>(1, kBlockElems / row_elems);
  Dims shape2{rows};
  for (int64_t i = x.dim() - trailing; i < x.dim(); ++i) shape2.push_back(x.shape()[i]);
  Tensor x2 = x.reshape(shape2);
  Tensor first = fn(x2.slice(0, 0, block));
  Tensor out = empty(shape2, first.dtype());
  copy_into(first, out.slice(0, 0, block));
  int64_t nblocks = (rows + block - 1) / block;
  parallel_for(1, nblocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t r0 = b * block, r1 = std::min(rows, r0 + block);
      copy_into(fn(x2.slice(0, r0, r1)), out.slice(0, r0, r1));
    }
  });
  return out.reshape(x.shape());
}

bool is_last_dim(const Tensor& x, int64_t dim, const char* op) {
  KILN_CHECK(x.defined(), "{}: the tensor is undefined", op);
  return x.dim() > 0 && wrap_dim(dim, x.dim(), op) == x.dim() - 1;
}

// The max over dims with infinities replaced by 0, so x - m stays finite where x is. Without
// history: softmax, log_softmax and logsumexp do not depend on the shift (their derivatives in
// m are 0 exactly), so their backward need not run amax's (a reduction and a mask of the
// maxima, to add zeros), at any order.
Tensor stable_shift(const Tensor& x, const Dims& dims) {
  Tensor m = amax(x.detach(), dims, true);
  return where(abs(m) == std::numeric_limits<double>::infinity(), 0.0, m);
}
}  // namespace

Tensor logsumexp(const Tensor& x_in, const Dims& dims, bool keepdim) {
  Tensor x = autocast_wide(x_in);
  KILN_CHECK(x.defined(), "logsumexp: the tensor is undefined");
  Dims axes = normalize_axes(dims, x.dim(), "logsumexp");
  auto f = [dims, axes, keepdim](const Tensor& in) {
    Tensor xf = in.to(to_float_dtype(in.dtype()));
    Tensor m = stable_shift(xf, dims);
    Tensor out = log(sum(exp(xf - m), dims, true)) + m;
    if (keepdim) return out;
    for (size_t i = axes.size(); i-- > 0;) out = out.squeeze(axes[i]);
    return out;
  };
  Tensor args[] = {x};
  if (!composite_fuses(args)) return f(x);
  std::string key = fmt::format("logsumexp rank={} dims={} keepdim={}", x.dim(), shape_str(dims), keepdim);
  return run_composite(key, args, [f](std::span<const Tensor> in) { return std::vector<Tensor>{f(in[0])}; })[0];
}

// A composite over rows of `dim` (make(d) is it for the dim wrapped, d): compiled on CUDA
// (runtime/composite_fusion.h), else by row blocks where dim is the last, else op by op.
template <class Make> Tensor along_dim(const char* op, const Tensor& x, int64_t dim, Make make) {
  bool last = is_last_dim(x, dim, op);
  int64_t d = x.dim() == 0 ? dim : wrap_dim(dim, x.dim(), op);
  auto f = make(d);
  Tensor args[] = {x};
  if (composite_fuses(args))
    return run_composite(fmt::format("{} dim={}", op, d), args,
                         [f](std::span<const Tensor> in) { return std::vector<Tensor>{f(in[0])}; })[0];
  return last ? by_row_blocks(x, 1, f) : f(x);
}

Tensor softmax(const Tensor& x_in, int64_t dim) {
  return along_dim("softmax", autocast_wide(x_in), dim, [](int64_t d) {
    return [d](const Tensor& in) {
      Tensor xf = in.to(to_float_dtype(in.dtype()));
      Tensor e = exp(xf - stable_shift(xf, {d}));
      return e / sum(e, {d}, true);
    };
  });
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  return along_dim("log_softmax", autocast_wide(x_in), dim, [](int64_t d) {
    return [d](const Tensor& in) {
      Tensor xf = in.to(to_float_dtype(in.dtype()));
      Tensor shifted = xf - stable_shift(xf, {d});
      return shifted - log(sum(exp(shifted), {d}, true));
    };
  });
}

Tensor layer_norm(const Tensor& x_in, const Dims& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  Tensor x = autocast_wide(x_in);
  KILN_CHECK(x.defined(), "layer_norm: the tensor is undefined");
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && k <= x.dim(), "layer_norm: normalized_shape {} does not fit input {}",
             shape_str(normalized_shape), x.type().str());
  Dims dims;
  for (int64_t i = 0; i < k; ++i) {
    KILN_CHECK(x.shape()[x.dim() - k + i] == normalized_shape[i],
               "layer_norm: normalized_shape {} does not match the trailing dims of {}", shape_str(normalized_shape),
               x.type().str());
    dims.push_back(x.dim() - k + i);
  }
  for (const Tensor* p : {&weight, &bias}) {
    KILN_CHECK(!p->defined() || p->shape() == normalized_shape,
               "layer_norm: weight and bias must have shape {}, got {}", shape_str(normalized_shape), p->type().str());
  }
  auto normalize = [k, eps](const Tensor& in, const Tensor& w, const Tensor& b) {
    Dims d;
    for (int64_t i = 0; i < k; ++i) d.push_back(in.dim() - k + i);
    Tensor centered = in - mean(in, d, true);
    Tensor y = centered * rsqrt(mean(centered * centered, d, true) + eps);
    if (w.defined()) y = y * w;
    if (b.defined()) y = y + b;
    return y;
  };
  std::vector<Tensor> args{x};
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) args.push_back(*p);
  if (composite_fuses(args)) {
    bool w = weight.defined(), b = bias.defined();
    std::string key = fmt::format("layer_norm k={} eps={} weight={} bias={}", k, eps, w, b);
    return run_composite(key, args, [normalize, w, b](std::span<const Tensor> in) {
      return std::vector<Tensor>{normalize(in[0], w ? in[1] : Tensor(), b ? in[1 + w] : Tensor())};
    })[0];
  }
  return by_row_blocks(x, k, [&](const Tensor& in) { return normalize(in, weight, bias); }, {weight, bias});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(weight.defined() && weight.dim() == 2, "linear: weight must be 2-d [out, in], got {}",
             weight.defined() ? weight.type().str() : "undefined");
  // Eagerly on CUDA, with a bias: one addmm (a cuBLASLt GEMM whose epilogue adds the bias), not
  // a GEMM and a pass over its result; the same meaning (runtime/ops/addmm.cpp). A trace
  // records the matmul and the add, which the matmul-epilogue pass joins.
  if (bias.defined() && x.defined() && x.dim() >= 2 && x.device().is_cuda() && !active_recorder()) {
    Tensor a = autocast_low(x), w = autocast_low(weight), b = autocast_low(bias);
    if (a.dtype() == w.dtype() && b.dtype() == a.dtype() && is_float(a.dtype()) && b.dim() == 1 &&
        a.shape().back() == w.shape()[1] && b.shape()[0] == w.shape()[0] && a.device() == w.device() &&
        b.device() == a.device()) {
      Dims out_shape = a.shape();
      out_shape.back() = w.shape()[0];
      Tensor args[] = {b, a.reshape({-1, a.shape().back()}), w.t()};
      return apply(OpId::Addmm, args).reshape(out_shape);
    }
  }
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? y + autocast_low(bias) : y;
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  KILN_CHECK(weight.defined() && weight.dim() == 2, "embedding: weight must be 2-d [num, dim], got {}",
             weight.defined() ? weight.type().str() : "undefined");
  Dims shape = indices.shape();
  shape.push_back(weight.shape()[1]);
  return index_select(weight, 0, indices.reshape({-1})).reshape(shape);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  KILN_CHECK(indices.defined() && is_integral(indices.dtype()), "one_hot: indices must be an integer tensor, got {}",
             indices.defined() ? indices.type().str() : "undefined");
  if (num_classes < 0) num_classes = indices.numel() == 0 ? 0 : max(indices).item<int64_t>() + 1;
  // A tracer has no values to check (and with num_classes given needs none): there, an index
  // outside [0, num_classes) gives a row of zeros.
  KILN_CHECK(indices.numel() == 0 || active_recorder() ||
                 (min(indices).item<int64_t>() >= 0 && max(indices).item<int64_t>() < num_classes),
             "one_hot: indices must lie in [0, {})", num_classes);
  return (indices.unsqueeze(-1) == arange(num_classes).to(indices.device())).to(DType::I64);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (!(equal_nan && std::isnan(x[i]) && std::isnan(y[i]))) return false;
      continue;
    }
    if (x[i] == y[i]) continue;  // equal infinities
    // An infinity is close only to itself (as torch.isclose): the bound rtol |inf| is infinite.
    if (std::isinf(x[i]) || std::isinf(y[i])) return false;
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  }
  return true;
}

}  // namespace kiln
