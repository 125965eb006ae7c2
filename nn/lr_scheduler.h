// nn/lr_scheduler.h -- learning-rate schedules (torch.optim.lr_scheduler's): StepLR,
// CosineAnnealingLR, LinearLR, LambdaLR, OneCycleLR and SequentialLR, each a closed form of
// its step count, and their state for checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/optimizer.h"

namespace kiln::optim {

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
  double pct_start = 0.3;               // the share of steps spent rising to max_lr
  std::string anneal_strategy = "cos";  // or "linear"
  bool cycle_momentum = true;           // momentum (Adam: beta1) falls as the rate rises, and back
  double base_momentum = 0.85, max_momentum = 0.95;
  double div_factor = 25;         // the first rate is max_lr / div_factor
  double final_div_factor = 1e4;  // the last is that / final_div_factor
  bool three_phase = false;       // rise, fall back to the first rate, then anneal to the last
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
