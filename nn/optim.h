// nn/optim.h -- optimizers (SGD, Adam, AdamW, RMSprop, Adagrad), their state for
// checkpoints, and learning-rate schedules.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
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
  /// The momentum factor a schedule may cycle (OneCycleLR): SGD's momentum, Adam's beta1 (the
  /// optimizers torch's OneCycleLR cycles). Like the learning rate it lives in a 0-d tensor, so
  /// a traced step reads the value of the call. A kiln::Error for an optimizer without one.
  virtual double momentum() const;
  virtual void set_momentum(double momentum);
  /// The learning rate the optimizer was made with: schedules start from it (torch's
  /// initial_lr), so schedules made one after another share one base.
  double initial_lr() const { return initial_lr_; }
  const std::vector<Tensor>& params() const { return params_; }

  /// Everything a step reads besides the parameters, by name, as torch's optimizer
  /// state_dict() holds it: "lr", "step" (where kept), and each parameter's buffers as
  /// "state.<index>.<name>" (Adam's exp_avg and exp_avg_sq, SGD's momentum_buffer, ...). The
  /// tensors themselves; save them with save_safetensors. An optimizer restored with
  /// load_state_dict takes the same steps, bit for bit, as the one that was saved.
  std::map<std::string, Tensor> state_dict() const;
  /// Copies `state` into this optimizer's state: the names must be state_dict()'s and each
  /// shape the same.
  void load_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  /// Names a tensor of the optimizer's state (a member, made up front) for state_dict.
  void register_state(std::string name, Tensor& t) { state_.emplace_back(std::move(name), &t); }
  /// The learning rate as a 0-d tensor of `dtype`, for the update arithmetic.
  Tensor lr_as(DType dtype) const;
  std::vector<Tensor> params_;
  double lr_, initial_lr_;
  Tensor lr_tensor_;  // f64[], updated in place by set_lr

 private:
  std::vector<std::pair<std::string, Tensor*>> state_;
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
  /// Momentum may change (a schedule) when the optimizer was made with some; not from 0.
  double momentum() const override { return opt_.momentum; }
  void set_momentum(double momentum) override;

 private:
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
  void step() override { update(true); }
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
  AdagradOptions opt_;
  std::vector<Tensor> sum_;
  Tensor steps_;  // f64[]
};

/// A learning-rate schedule: step() advances its count t and sets the optimizer's rate to
/// lr_at(t), a closed form from the optimizer's initial_lr() (torch's schedules, counted the
/// same way: the constructor sets lr_at(0)).
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();
  /// The rate after t calls of step().
  virtual double lr_at(int64_t t) const = 0;
  int64_t last_epoch() const { return t_; }
  /// What a checkpoint keeps: {"last_epoch": t} (every rate is a closed form of t). Loading it
  /// sets the optimizer's rate (and momentum, for OneCycleLR) to what they were at t.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 protected:
  explicit LRScheduler(Optimizer& opt) : opt_(opt), base_(opt.initial_lr()) {}
  /// Sets lr_at(0); each schedule's constructor calls it last.
  void start() { apply(0); }
  /// Sets the optimizer as the schedule has it after t steps.
  virtual void apply(int64_t t) { opt_.set_lr(lr_at(t)); }
  Optimizer& opt_;
  double base_;

 private:
  int64_t t_ = 0;
  friend class SequentialLR;
};

/// Multiplies the learning rate by gamma every step_size calls of step().
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t t) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = eta_min + (base - eta_min) (1 + cos(pi t / t_max)) / 2, t counted by step() (past
/// t_max it rises again, as torch.optim.lr_scheduler.CosineAnnealingLR does).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  double lr_at(int64_t t) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// base times a factor going linearly from start_factor to end_factor over total_iters steps,
/// then end_factor (warmup; torch.optim.lr_scheduler.LinearLR).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(int64_t t) const override;

 private:
  double start_, end_;
  int64_t total_;
};

/// base times lambda(t) (torch.optim.lr_scheduler.LambdaLR).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda);
  double lr_at(int64_t t) const override;

 private:
  std::function<double(int64_t)> lambda_;
};

struct OneCycleOptions {
  double pct_start = 0.3;            // the share of steps spent rising to max_lr
  std::string anneal_strategy = "cos";  // or "linear"
  bool cycle_momentum = true;        // momentum (Adam: beta1) falls as the rate rises, and back
  double base_momentum = 0.85, max_momentum = 0.95;
  double div_factor = 25;            // the first rate is max_lr / div_factor
  double final_div_factor = 1e4;     // the last is that / final_div_factor
  bool three_phase = false;          // rise, fall back to the first rate, then anneal to the last
};
/// torch.optim.lr_scheduler.OneCycleLR: the rate rises from max_lr / div_factor to max_lr over
/// pct_start of total_steps, then anneals to its lowest at step total_steps - 1, while the
/// momentum (SGD's momentum, Adam's beta1) does the reverse between max and base. Stepping past
/// total_steps is a kiln::Error, as in torch.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, OneCycleOptions options = {});
  double lr_at(int64_t t) const override;
  double momentum_at(int64_t t) const;

 private:
  struct Phase {
    double end_step, start_lr, end_lr, start_momentum, end_momentum;
  };
  // The value at step t between a phase's start and end values.
  double at(int64_t t, bool momentum) const;
  void apply(int64_t t) override;
  int64_t total_;
  OneCycleOptions options_;
  std::vector<Phase> phases_;
};

/// Runs schedules one after another: schedules[i] from milestones[i - 1] on, counted from 0 at
/// its milestone (warmup then cosine: {LinearLR, CosineAnnealingLR} with one milestone).
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones);
  double lr_at(int64_t t) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace kiln::optim
