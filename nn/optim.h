// nn/optim.h -- optimizers (SGD, Adam, AdamW, RMSprop, Adagrad), their state for
// checkpoints, and learning-rate schedules: including it gets all of them. Their base is
// nn/optimizer.h, the schedules nn/lr_scheduler.h; the updates are nn/sgd.cpp, nn/adam.cpp and
// nn/rmsprop_adagrad.cpp.
#pragma once

#include <vector>

#include "nn/lr_scheduler.h"
#include "nn/optimizer.h"
#include "runtime/tensor.h"

namespace kiln::optim {

struct SgdOptions {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
/// torch.optim.SGD: v = momentum v + (1 - dampening) g; p -= lr (nesterov ? g + momentum v : v).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, SgdOptions options = {});
  void step() override;
  /// Momentum may change (a schedule) when the optimizer was made with some; not from 0.
  double momentum() const override { return opt_.momentum; }
  void set_momentum(double momentum) override;

 private:
  void update();
  SgdOptions opt_;
  std::vector<Tensor> velocity_;
  Tensor steps_;     // f64[]: PyTorch's first momentum step takes the gradient undamped
  Tensor momentum_;  // f64[]: opt_.momentum, read by traced steps
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};
/// torch.optim.Adam (weight decay added to the gradient).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, AdamOptions options = {});
  void step() override;
  /// beta1, as torch's OneCycleLR cycles it; the first moment's bias correction uses the
  /// current beta1, as torch's does.
  double momentum() const override { return opt_.beta1; }
  void set_momentum(double beta1) override;

 protected:
  void update(bool decoupled);
  AdamOptions opt_;
  std::vector<Tensor> m_, v_;
  Tensor steps_;  // f64[]: the bias corrections' step count
  Tensor beta1_;  // f64[]: opt_.beta1, read by traced steps
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
  void step() override {
    run_step([this] { update(true); });
  }
};

struct RmspropOptions {
  double alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool centered = false;
};
/// torch.optim.RMSprop: s = alpha s + (1 - alpha) g^2; avg = sqrt(s) + eps (centered: the
/// gradient's running mean a subtracted, sqrt(s - a^2) + eps); p -= lr g / avg, or through a
/// momentum buffer b = momentum b + g / avg, p -= lr b.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, double lr = 1e-2, RmspropOptions options = {});
  void step() override;

 private:
  void update();
  RmspropOptions opt_;
  std::vector<Tensor> square_avg_, momentum_buffer_, grad_avg_;
};

struct AdagradOptions {
  double lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10;
};
/// torch.optim.Adagrad: s += g^2; p -= lr / (1 + (t - 1) lr_decay) g / (sqrt(s) + eps).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<Tensor> params, double lr = 1e-2, AdagradOptions options = {});
  void step() override;

 private:
  void update();
  AdagradOptions opt_;
  std::vector<Tensor> sum_;
  Tensor steps_;  // f64[]
};

}  // namespace kiln::optim
