// nn/loss.cpp -- losses.
#include "nn/loss.h"

#include <fmt/format.h>

#include <string>

#include "runtime/api.h"
#include "runtime/autocast.h"
#include "runtime/check.h"
#include "runtime/composite_fusion.h"

namespace kiln {
namespace {

Tensor reduce(const Tensor& per_element, Reduction r) {
  switch (r) {
    case Reduction::None: return per_element;
    case Reduction::Sum: return sum(per_element);
    case Reduction::Mean: return mean(per_element);
  }
  return per_element;
}

// Moves the class dim (1) last and flattens: [N, C, d...] -> [N*d..., C].
Tensor classes_last(const Tensor& x) {
  if (x.dim() == 2) return x;
  Dims order{0};
  for (int64_t i = 2; i < x.dim(); ++i) order.push_back(i);
  order.push_back(1);
  return x.permute(order).reshape({-1, x.shape()[1]});
}

void check_targets(const char* op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(input.defined() && target.defined(), "{}: undefined input or target", op);
  KILN_CHECK(input.dim() >= 2, "{}: input must be [N, C] or [N, C, d...], got {}", op, input.type().str());
  KILN_CHECK(is_integral(target.dtype()), "{}: target must hold integer class indices, got {}", op,
             target.type().str());
  Dims expect = input.shape();
  expect.erase(1);
  KILN_CHECK(target.shape() == expect, "{}: target {} does not match input {} (expected {})", op, target.type().str(),
             input.type().str(), shape_str(expect));
}

}  // namespace

Tensor mse_loss(const Tensor& pred_in, const Tensor& target_in, Reduction reduction) {
  Tensor pred = autocast_wide(pred_in), target = autocast_wide(target_in);  // losses in f32 under autocast
  KILN_CHECK(pred.defined() && target.defined() && pred.shape() == target.shape(),
             "mse_loss: prediction {} and target {} must have one shape", pred.type().str(), target.type().str());
  auto f = [reduction](const Tensor& p, const Tensor& t) {
    Tensor d = p - t;
    return reduce(d * d, reduction);
  };
  Tensor args[] = {pred, target};
  if (!composite_fuses(args)) return f(pred, target);
  std::string key = fmt::format("mse_loss reduction={}", static_cast<int>(reduction));
  return run_composite(key, args, [f](std::span<const Tensor> in) { return std::vector<Tensor>{f(in[0], in[1])}; })[0];
}

Tensor nll_loss(const Tensor& logp_in, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  Tensor logp = autocast_wide(logp_in);
  check_targets("nll_loss", logp, target);
  Tensor lp = classes_last(logp);
  Tensor t = target.reshape({-1}).to(DType::I64);
  Tensor keep = t != ignore_index;
  // gather rejects a class outside [0, C) (reading values here would not trace); it would
  // wrap a negative one, so those are moved past the end first.
  Tensor safe = where(keep, where(t < 0, lp.shape()[1], t), 0);
  Tensor picked = -gather(lp, 1, safe.unsqueeze(1)).squeeze(1);
  Tensor losses = where(keep, picked, 0.0);
  if (reduction == Reduction::Mean) {
    Tensor total = sum(losses);  // one statement each: the traced graph's order is fixed
    Tensor count = sum(keep.to(losses.dtype()));
    return total / count;
  }
  if (reduction == Reduction::None) return losses.reshape(target.shape());
  return sum(losses);
}

namespace {
Tensor cross_entropy_ops(const Tensor& logits, const Tensor& target, Reduction reduction, double label_smoothing,
                         int64_t ignore_index) {
  Tensor logp = log_softmax(logits, 1);
  Tensor nll = nll_loss(logp, target, reduction, ignore_index);
  if (label_smoothing == 0) return nll;
  // The smoothing term: mean over classes of -log p, for the targets that count.
  Tensor lp = classes_last(logp);
  Tensor keep = (target.reshape({-1}) != ignore_index).to(lp.dtype());
  Tensor smooth = -mean(lp, {1}) * keep;
  Tensor s;
  if (reduction == Reduction::Mean) {
    Tensor total = sum(smooth);
    s = total / sum(keep);
  } else if (reduction == Reduction::Sum) s = sum(smooth);
  else s = smooth.reshape(target.shape());
  return nll * (1.0 - label_smoothing) + s * label_smoothing;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, Reduction reduction, double label_smoothing,
                     int64_t ignore_index) {
  check_targets("cross_entropy", logits_in, target);
  KILN_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got {}",
             label_smoothing);
  Tensor logits = autocast_wide(logits_in);
  Tensor args[] = {logits, target};
  if (!composite_fuses(args)) return cross_entropy_ops(logits, target, reduction, label_smoothing, ignore_index);
  std::string key = fmt::format("cross_entropy reduction={} label_smoothing={} ignore_index={}",
                                static_cast<int>(reduction), label_smoothing, ignore_index);
  return run_composite(key, args, [=](std::span<const Tensor> in) {
    return std::vector<Tensor>{cross_entropy_ops(in[0], in[1], reduction, label_smoothing, ignore_index)};
  })[0];
}

Tensor binary_cross_entropy_with_logits(const Tensor& x_in, const Tensor& y_in, Reduction reduction,
                                        const Tensor& pos_weight) {
  Tensor x = autocast_wide(x_in), y = autocast_wide(y_in);
  KILN_CHECK(x.defined() && y.defined() && x.shape() == y.shape(),
             "binary_cross_entropy_with_logits: logits {} and target {} must have one shape", x.type().str(),
             y.type().str());
  auto f = [reduction](const Tensor& x, const Tensor& y, const Tensor& pos_weight) {
    Tensor softplus_neg = log1p(exp(-abs(x))) + maximum(-x, 0.0);  // log(1 + exp(-x)), stable
    Tensor loss;
    if (pos_weight.defined()) {
      // (1 - y) x + (1 + (w - 1) y) log(1 + exp(-x))
      Tensor lw = (pos_weight - 1.0) * y + 1.0;
      loss = (1.0 - y) * x + lw * softplus_neg;
    } else {
      loss = (1.0 - y) * x + softplus_neg;
    }
    return reduce(loss, reduction);
  };
  std::vector<Tensor> args{x, y};
  if (pos_weight.defined()) args.push_back(pos_weight);
  if (!composite_fuses(args)) return f(x, y, pos_weight);
  std::string key = fmt::format("binary_cross_entropy_with_logits reduction={} pos_weight={}",
                                static_cast<int>(reduction), pos_weight.defined());
  return run_composite(key, args, [f](std::span<const Tensor> in) {
    return std::vector<Tensor>{f(in[0], in[1], in.size() > 2 ? in[2] : Tensor())};
  })[0];
}

}  // namespace kiln
