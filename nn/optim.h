// nn/optim.h -- optimizers (SGD, Adam, AdamW) and learning-rate schedules.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace kiln::optim {

/// Updates parameters in place from their grad(), without recording gradients.
///
/// Eagerly, step() updates every parameter that is a contiguous f32 or f64 CPU tensor in one
/// fused pass over memory (all parameters' elements split across kiln's threads, each element
/// of p, its gradient and its state read and written once), with no temporaries; other
/// parameters take the same arithmetic as Tensor ops.
///
/// Traceable: the learning rate and step counts live in 0-d tensors and all state is created
/// up front, so a jit::trace of a training step that calls step() reads the current learning
/// rate (set_lr, schedules) and state on every call instead of baking them in. Traced, the
/// update is recorded as Tensor ops (the same arithmetic), which the jit fuses.
class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  /// Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr);
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  /// The learning rate as a 0-d tensor of `dtype`, for the update arithmetic.
  Tensor lr_as(DType dtype) const;
  std::vector<Tensor> params_;
  double lr_;
  Tensor lr_tensor_;  // f64[], updated in place by set_lr
};

struct SgdOptions {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
/// torch.optim.SGD: v = momentum v + (1 - dampening) g; p -= lr (nesterov ? g + momentum v : v).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, SgdOptions options = {});
  void step() override;

 private:
  SgdOptions opt_;
  std::vector<Tensor> velocity_;
  Tensor steps_;  // f64[]: PyTorch's first momentum step takes the gradient undamped
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};
/// torch.optim.Adam (weight decay added to the gradient).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, AdamOptions options = {});
  void step() override;

 protected:
  void update(bool decoupled);
  AdamOptions opt_;
  std::vector<Tensor> m_, v_;
  Tensor steps_;  // f64[]: the bias corrections' step count
};

/// AdamW's options: Adam's, with PyTorch's default weight decay (its own struct, so that
/// `AdamW(params, lr, {.eps = 1e-6})` keeps the decay).
struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};
/// torch.optim.AdamW: weight decay applied to the parameter, decoupled from the gradient.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, AdamWOptions options = {});
  void step() override { update(true); }
};

/// Multiplies the learning rate by gamma every step_size calls of step().
class StepLR {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  void step();

 private:
  Optimizer& opt_;
  int64_t step_size_, epoch_ = 0;
  double gamma_, base_;
};

/// lr = eta_min + (base - eta_min) (1 + cos(pi t / t_max)) / 2, t counted by step() (past
/// t_max it rises again, as torch.optim.lr_scheduler.CosineAnnealingLR does).
class CosineAnnealingLR {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  void step();

 private:
  Optimizer& opt_;
  int64_t t_max_, t_ = 0;
  double eta_min_, base_;
};

}  // namespace kiln::optim
