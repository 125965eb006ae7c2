// nn/amp.cpp -- GradScaler (nn/amp.h).
#include "nn/amp.h"

#include <cmath>
#include <limits>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/recorder.h"

namespace kiln::amp {

GradScaler::GradScaler(GradScalerOptions o) : options_(o), scale_(o.init_scale) {
  KILN_CHECK(
      o.init_scale > 0 && o.growth_factor > 1 && o.backoff_factor > 0 && o.backoff_factor < 1 && o.growth_interval > 0,
      "GradScaler: expected init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval > 0");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss.to(DType::F32) * scale_;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled || unscaled_) return;
  KILN_CHECK(active_recorder() == nullptr,
             "GradScaler: unscale_ and step read on the host whether the gradients are "
             "finite, so they cannot run inside jit::trace; trace the forward and backward, and step eagerly");
  NoGradGuard no_grad;
  const double inf = std::numeric_limits<double>::infinity();
  int64_t bad = 0;
  for (const Tensor& p : opt.params()) {
    if (!p.grad().defined()) continue;
    // A new tensor, not mul_: a gradient may be an expanded view (sum's is).
    Tensor g = p.grad() * (1.0 / scale_);
    Tensor(p).set_grad(g);
    // Neither NaN nor +-inf is below infinity.
    bad += sum(logical_not(lt(abs(g), inf))).item<int64_t>();
  }
  found_inf_ = bad > 0;
  unscaled_ = true;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  unscale_(opt);
  if (!found_inf_) opt.step();
  return !found_inf_;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  KILN_CHECK(unscaled_, "GradScaler: update() comes after step() (or unscale_())");
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
  } else if (++clean_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
  unscaled_ = found_inf_ = false;
}

}  // namespace kiln::amp
