// nn/amp.h -- GradScaler, for training with f16 (torch.amp.GradScaler): the loss is multiplied
// by a scale before backward so small f16 gradients do not flush to zero; step() divides the
// gradients by it again and skips the optimizer's step when any is infinite or NaN, and
// update() halves the scale after such a step and doubles it after growth_interval clean ones.
//
//   amp::GradScaler scaler;
//   {
//     AutocastGuard autocast(f16);
//     loss = cross_entropy(model(x), y);
//   }
//   scaler.scale(loss).backward();
//   scaler.step(opt);      // or scaler.unscale_(opt), clip_grad_norm_(...), scaler.step(opt)
//   scaler.update();
//
// step() reads on the host whether the gradients are finite, so it runs eagerly: inside
// jit::trace it is an error.
#pragma once

#include "nn/optim.h"

namespace kiln::amp {

struct GradScalerOptions {
  double init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() returns the loss, step() steps, update() does nothing
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  /// loss times the scale (in f32).
  Tensor scale(const Tensor& loss) const;
  /// Divides opt's gradients by the scale, in place, once per step; notes whether any element
  /// is infinite or NaN.
  void unscale_(optim::Optimizer& opt);
  /// Unscales (if not yet) and steps opt unless a gradient was infinite or NaN; returns whether
  /// it stepped.
  bool step(optim::Optimizer& opt);
  /// After a step: the scale times backoff_factor if it was skipped, times growth_factor after
  /// growth_interval steps in a row that were not.
  void update();
  double get_scale() const { return scale_; }

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  bool unscaled_ = false, found_inf_ = false;
};

}  // namespace kiln::amp
