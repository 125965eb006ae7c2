// nn/norm.cpp -- batch, group and RMS normalization, functional and as modules, composites of
// ops (so they differentiate, trace and run on every device). Batch norm's running statistics
// are buffers updated in place, by eager steps and by traced whole steps alike (the trace
// records the in-place update as an assign, as it does an optimizer's).
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "nn/layers.h"
#include "runtime/check.h"
#include "runtime/composite_fusion.h"

namespace kiln::nn {

namespace {

// [1, C, 1, ...]: a per-channel vector shaped to broadcast over x [N, C, ...].
Tensor per_channel(const Tensor& v, const Tensor& x) {
  Dims shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.shape()[1];
  return v.reshape(shape);
}

// The dims batch norm reduces: all but the channel dim.
Dims all_but_channels(const Tensor& x) {
  Dims axes{0};
  for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
  return axes;
}

// The statistics' new value, (1 - factor) running + factor batch (the caller writes it where
// the running tensor lives; a trace records that as an assign).
Tensor updated_running(const Tensor& running, const Tensor& batch, const Tensor& factor) {
  NoGradGuard no_grad;
  Tensor f = factor.to(running.dtype());
  return running * (1.0 - f) + batch.detach().to(running.dtype()) * f;
}

// The batch statistics (mean, biased variance) of x over `axes` in one pass, shaped
// [1, C, 1, ...]: the sums of d and of d^2 for d = x - k, k one value of each channel (its
// first), so the variance does not cancel when the mean is large beside the spread (the
// shifted-data algorithm; a two-pass variance read x twice more). The variance does not
// depend on k, so k takes no gradient. (Kept dims, so the per-channel work that follows is one
// fused group, not one per reshape.)
std::pair<Tensor, Tensor> batch_stats(const Tensor& x, const Dims& axes, int64_t count) {
  Tensor k = x.detach();
  for (int64_t a : axes) k = k.slice(a, 0, 1);  // [1, C, 1, ...]
  Tensor d = x - k;
  Tensor m1 = d.sum(axes, true) * (1.0 / static_cast<double>(count));
  Tensor m2 = (d * d).sum(axes, true) * (1.0 / static_cast<double>(count));
  Tensor var = clamp(m2 - m1 * m1, Scalar(0.0), std::nullopt);  // >= 0 whatever the rounding
  return {k + m1, var};
}

Tensor normalized(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight, const Tensor& bias,
                  double eps) {
  Tensor y = (x - per_channel(mean, x)) * rsqrt(per_channel(var, x) + eps);
  if (weight.defined()) y = y * per_channel(weight, x);
  if (bias.defined()) y = y + per_channel(bias, x);
  return y;
}

// Batch norm's result, then, when training with running statistics, their new values (the
// update weighted by `factor`, a 0-d tensor). Undefined tensors are absent.
std::vector<Tensor> batch_norm_values(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                      const Tensor& weight, const Tensor& bias, bool training, const Tensor& factor,
                                      double eps) {
  if (!training) return {normalized(x, running_mean.to(x.dtype()), running_var.to(x.dtype()), weight, bias, eps)};
  Dims axes = all_but_channels(x);
  int64_t count = x.numel() / x.shape()[1];
  auto [mean, var] = batch_stats(x, axes, count);
  std::vector<Tensor> out{normalized(x, mean, var, weight, bias, eps)};
  if (running_mean.defined()) {
    Dims c{x.shape()[1]};
    double unbiased = static_cast<double>(count) / static_cast<double>(count - 1);
    out.push_back(updated_running(running_mean, mean.reshape(c), factor));
    out.push_back(updated_running(running_var, var.reshape(c) * unbiased, factor));
  }
  return out;
}

// Batch norm with the running statistics' update weighted by `factor` (a 0-d tensor).
Tensor batch_norm_with(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, const Tensor& factor, double eps) {
  KILN_CHECK(x.defined() && x.dim() >= 2, "batch_norm: expected an input [N, C, ...], got {}",
             x.defined() ? x.type().str() : "undefined");
  int64_t c = x.shape()[1];
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    KILN_CHECK(!t->defined() || (t->dim() == 1 && t->shape()[0] == c),
               "batch_norm: per-channel tensors must be [{}] for input {}, got {}", c, x.type().str(), t->type().str());
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: give both running_mean and running_var, or neither");
  KILN_CHECK(training || running_mean.defined(),
             "batch_norm: evaluation needs running statistics (or training = true)");
  KILN_CHECK(!training || x.numel() / std::max<int64_t>(c, 1) > 1,
             "batch_norm: expected more than 1 value per channel when training, got input {}", x.type().str());
  bool running = running_mean.defined(), w = weight.defined(), b = bias.defined();
  std::vector<Tensor> args{x};
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var})
    if (t->defined()) args.push_back(*t);
  if (training && running) args.push_back(factor);
  std::vector<Tensor> out;
  if (composite_fuses(args)) {
    std::string key =
        fmt::format("batch_norm training={} eps={} weight={} bias={} running={}", training, eps, w, b, running);
    out = run_composite(key, args, [=](std::span<const Tensor> in) {
      size_t k = 1;
      auto next = [&](bool present) { return present ? in[k++] : Tensor(); };
      Tensor wi = next(w), bi = next(b), rm = next(running), rv = next(running), f = next(training && running);
      return batch_norm_values(in[0], rm, rv, wi, bi, training, f, eps);
    });
  } else {
    out = batch_norm_values(x, running_mean, running_var, weight, bias, training, factor, eps);
  }
  if (out.size() == 3) {
    NoGradGuard no_grad;
    Tensor rm = running_mean, rv = running_var;  // handles to the same tensors
    rm.copy_(out[1]);
    rv.copy_(out[2]);
  }
  return out[0];
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return batch_norm_with(x, running_mean, running_var, weight, bias, training, scalar_tensor(momentum, DType::F64),
                         eps);
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  KILN_CHECK(x.defined() && x.dim() >= 2, "group_norm: expected an input [N, C, ...], got {}",
             x.defined() ? x.type().str() : "undefined");
  int64_t c = x.shape()[1];
  KILN_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm: {} groups must divide the {} channels of {}",
             num_groups, c, x.type().str());
  for (const Tensor* t : {&weight, &bias})
    KILN_CHECK(!t->defined() || (t->dim() == 1 && t->shape()[0] == c),
               "group_norm: weight and bias must be [{}] for input {}, got {}", c, x.type().str(), t->type().str());
  auto normalize = [num_groups, eps](const Tensor& in, const Tensor& w, const Tensor& b) {
    Tensor g = in.reshape({in.shape()[0], num_groups, -1});
    Tensor mean = kiln::mean(g, {2}, true), var = kiln::var(g, {2}, 0, true);
    Tensor y = ((g - mean) * rsqrt(var + eps)).reshape(in.shape());
    if (w.defined()) y = y * per_channel(w, in);
    if (b.defined()) y = y + per_channel(b, in);
    return y;
  };
  std::vector<Tensor> args{x};
  for (const Tensor* t : {&weight, &bias})
    if (t->defined()) args.push_back(*t);
  if (!composite_fuses(args)) return normalize(x, weight, bias);
  bool w = weight.defined(), b = bias.defined();
  std::string key = fmt::format("group_norm groups={} eps={} weight={} bias={}", num_groups, eps, w, b);
  return run_composite(key, args, [normalize, w, b](std::span<const Tensor> in) {
    return std::vector<Tensor>{normalize(in[0], w ? in[1] : Tensor(), b ? in[1 + w] : Tensor())};
  })[0];
}

double default_rms_eps(DType t) {
  switch (t) {
    case DType::F64: return std::numeric_limits<double>::epsilon();
    case DType::F16: return 0.0009765625;  // 2^-10
    case DType::BF16: return 0.0078125;    // 2^-7
    default: return std::numeric_limits<float>::epsilon();
  }
}

Tensor rms_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  KILN_CHECK(x.defined(), "rms_norm: undefined input");
  size_t k = normalized_shape.size();
  bool fits = k >= 1 && k <= static_cast<size_t>(x.dim());
  for (size_t i = 0; fits && i < k; ++i) fits = x.shape()[x.shape().size() - k + i] == normalized_shape[i];
  KILN_CHECK(fits, "rms_norm: normalized_shape {} must be the trailing dims of {}", shape_str(normalized_shape),
             x.type().str());
  KILN_CHECK(!weight.defined() || weight.shape() == normalized_shape, "rms_norm: weight must be {}, got {}",
             shape_str(normalized_shape), weight.type().str());
  Dims axes;
  for (size_t i = 0; i < k; ++i) axes.push_back(x.dim() - static_cast<int64_t>(k) + static_cast<int64_t>(i));
  double e = eps.value_or(default_rms_eps(x.dtype()));
  auto normalize = [axes, e](const Tensor& in, const Tensor& w) {
    Tensor y = in * rsqrt(kiln::mean(in * in, axes, true) + e);
    return w.defined() ? y * w : y;
  };
  std::vector<Tensor> args{x};
  if (weight.defined()) args.push_back(weight);
  if (!composite_fuses(args)) return normalize(x, weight);
  std::string key = fmt::format("rms_norm dims={} eps={} weight={}", shape_str(axes), e, weight.defined());
  return run_composite(key, args, [normalize](std::span<const Tensor> in) {
    return std::vector<Tensor>{normalize(in[0], in.size() > 1 ? in[1] : Tensor())};
  })[0];
}

// ---- modules ---------------------------------------------------------------------------------

BatchNorm::BatchNorm(int64_t num_features, BatchNormOptions options, int64_t min_rank, int64_t max_rank,
                     const char* name)
    : options(options), min_rank_(min_rank), max_rank_(max_rank), name_(name) {
  KILN_CHECK(num_features > 0, "{}: num_features must be positive, got {}", name, num_features);
  KILN_CHECK(!options.momentum || (*options.momentum >= 0 && *options.momentum <= 1),
             "{}: momentum must be in [0, 1], got {}", name, options.momentum.value_or(0));
  if (options.affine) {
    weight = ones({num_features});
    bias = zeros({num_features});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  if (options.track_running_stats) {
    running_mean = zeros({num_features});
    running_var = ones({num_features});
    num_batches_tracked = zeros({}, DType::I64);
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() >= min_rank_ && x.dim() <= max_rank_, "{}: expected an input of rank {}, got {}",
             name_, min_rank_ == max_rank_ ? std::to_string(min_rank_) : fmt::format("{} or {}", min_rank_, max_rank_),
             x.defined() ? x.type().str() : "undefined");
  // Batch statistics while training, and always without running statistics (as torch).
  bool batch_stats = is_training() || !options.track_running_stats;
  Tensor factor = scalar_tensor(options.momentum.value_or(0.0), DType::F64);
  if (is_training() && options.track_running_stats) {
    {
      NoGradGuard no_grad;
      num_batches_tracked.add_(1);
    }
    // momentum = none: the cumulative average, 1 / batches seen.
    if (!options.momentum) factor = 1.0 / num_batches_tracked.to(DType::F64);
  }
  bool update = is_training() && options.track_running_stats;
  return batch_norm_with(x, update || !batch_stats ? running_mean : Tensor(),
                         update || !batch_stats ? running_var : Tensor(), weight, bias, batch_stats, factor,
                         options.eps);
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups_(num_groups), eps_(eps) {
  KILN_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0,
             "GroupNorm: {} groups must divide {} channels", num_groups, num_channels);
  if (affine) {
    weight = ones({num_channels});
    bias = zeros({num_channels});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

RMSNorm::RMSNorm(Dims shape, std::optional<double> eps, bool elementwise_affine) : shape_(shape), eps_(eps) {
  if (elementwise_affine) {
    weight = ones(shape);
    register_parameter("weight", weight);
  }
}

}  // namespace kiln::nn
