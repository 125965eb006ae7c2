// nn/lr_scheduler.cpp -- the learning-rate schedules: each sets the optimizer's rate (and
// OneCycleLR its momentum) from a closed form of its step count.
#include "nn/lr_scheduler.h"

#include <cmath>
#include <utility>

#include "runtime/check.h"

namespace kiln::optim {

void LRScheduler::step() {
  apply(t_ + 1);  // first: a step that throws (past OneCycleLR's end) leaves the count as it was
  ++t_;
}

std::map<std::string, double> LRScheduler::state_dict() const { return {{"last_epoch", static_cast<double>(t_)}}; }

void LRScheduler::load_state_dict(const std::map<std::string, double>& state) {
  auto it = state.find("last_epoch");
  KILN_CHECK(it != state.end() && state.size() == 1 && it->second >= 0 && it->second == std::floor(it->second),
             "scheduler load_state_dict: expected {{\"last_epoch\": a step count}}, got {} entries", state.size());
  t_ = static_cast<int64_t>(it->second);
  apply(t_);
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, OneCycleOptions o)
    : LRScheduler(opt), total_(total_steps), options_(std::move(o)) {
  KILN_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got {}", total_steps);
  KILN_CHECK(options_.pct_start >= 0 && options_.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got {}",
             options_.pct_start);
  KILN_CHECK(options_.anneal_strategy == "cos" || options_.anneal_strategy == "linear",
             "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"{}\"", options_.anneal_strategy);
  KILN_CHECK(max_lr >= 0 && options_.div_factor > 0 && options_.final_div_factor > 0,
             "OneCycleLR: max_lr must be non-negative and the div factors positive");
  if (options_.cycle_momentum) opt.momentum();  // throws for an optimizer without one
  double initial = max_lr / options_.div_factor, min_lr = initial / options_.final_div_factor;
  double up = options_.pct_start * double(total_steps) - 1, last = double(total_steps) - 1;
  double lo = options_.base_momentum, hi = options_.max_momentum;
  if (options_.three_phase)
    phases_ = {{up, initial, max_lr, hi, lo},
               {2 * options_.pct_start * double(total_steps) - 2, max_lr, initial, lo, hi},
               {last, initial, min_lr, hi, hi}};
  else phases_ = {{up, initial, max_lr, hi, lo}, {last, max_lr, min_lr, lo, hi}};
  start();
}

// torch's _anneal_func over each phase: pct of the way from the previous phase's end step.
double OneCycleLR::at(int64_t t, bool momentum) const {
  KILN_CHECK(t <= total_, "OneCycleLR: stepped {} times, past total_steps = {}", t, total_);
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (double(t) <= p.end_step || i + 1 == phases_.size()) {
      double pct = (double(t) - start_step) / (p.end_step - start_step);
      double a = momentum ? p.start_momentum : p.start_lr, b = momentum ? p.end_momentum : p.end_lr;
      if (options_.anneal_strategy == "cos") return b + (a - b) / 2.0 * (std::cos(M_PI * pct) + 1);
      return (b - a) * pct + a;
    }
    start_step = p.end_step;
  }
  return 0;  // unreachable: the last phase takes every t
}

double OneCycleLR::lr_at(int64_t t) const { return at(t, false); }
double OneCycleLR::momentum_at(int64_t t) const { return at(t, true); }

void OneCycleLR::apply(int64_t t) {
  opt_.set_lr(lr_at(t));
  if (options_.cycle_momentum) opt_.set_momentum(momentum_at(t));
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
  start();
}
double StepLR::lr_at(int64_t t) const { return base_ * std::pow(gamma_, static_cast<double>(t / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  KILN_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got {}", t_max);
  start();
}
double CosineAnnealingLR::lr_at(int64_t t) const {
  // The closed form PyTorch's schedule follows; past t_max it continues along the cosine.
  double c = std::cos(M_PI * static_cast<double>(t) / static_cast<double>(t_max_));
  return eta_min_ + (base_ - eta_min_) * (1 + c) / 2;
}

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_(start_factor), end_(end_factor), total_(total_iters) {
  KILN_CHECK(start_factor > 0 && start_factor <= 1 && end_factor >= 0 && end_factor <= 1 && total_iters >= 0,
             "LinearLR: expected 0 < start_factor <= 1, 0 <= end_factor <= 1 and total_iters >= 0, got {}, {}, {}",
             start_factor, end_factor, total_iters);
  start();
}
double LinearLR::lr_at(int64_t t) const {
  if (t >= total_) return base_ * end_;
  return base_ * (start_ + (end_ - start_) * static_cast<double>(t) / static_cast<double>(total_));
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda)
    : LRScheduler(opt), lambda_(std::move(lambda)) {
  KILN_CHECK(lambda_ != nullptr, "LambdaLR: the lambda is empty");
  start();
}
double LambdaLR::lr_at(int64_t t) const { return base_ * lambda_(t); }

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(),
             "SequentialLR: expected one milestone fewer than schedulers, got {} schedulers and {} milestones",
             schedulers_.size(), milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i)
    KILN_CHECK(schedulers_[i] && &schedulers_[i]->opt_ == &opt, "SequentialLR: scheduler {} is not of this optimizer",
               i);
  for (size_t i = 1; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > milestones_[i - 1], "SequentialLR: milestones must increase");
  start();
}
double SequentialLR::lr_at(int64_t t) const {
  size_t i = 0;
  while (i < milestones_.size() && t >= milestones_[i]) ++i;
  return schedulers_[i]->lr_at(i == 0 ? t : t - milestones_[i - 1]);
}

}  // namespace kiln::optim
