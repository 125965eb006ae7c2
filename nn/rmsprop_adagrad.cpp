// nn/rmsprop_adagrad.cpp -- torch.optim.RMSprop's and Adagrad's updates, in place under
// NoGradGuard, each rule written once (run fused or on Tensors, nn/optim_fused.h).
#include "nn/optim.h"

#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "nn/optim_fused.h"
#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln::optim {
using namespace detail;  // the values a rule runs on, and the fused pass (nn/optim_fused.h)
namespace {

// torch.optim.RMSprop, with lr the step's rate.
template <class S, class K>
void rmsprop_update(S& p, S g, S& square_avg, S& buffer, S& grad_avg, const K& lr, const RmspropOptions& o) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) g = g + p * N(o.weight_decay);
  square_avg = square_avg * N(o.alpha) + g * g * N(1 - o.alpha);
  S avg = sqrt(square_avg) + N(o.eps);
  if (o.centered) {
    grad_avg = grad_avg * N(o.alpha) + g * N(1 - o.alpha);
    avg = sqrt(square_avg - grad_avg * grad_avg) + N(o.eps);
  }
  if (o.momentum > 0) {
    buffer = buffer * N(o.momentum) + g / avg;
    p = p - buffer * lr;
  } else {
    p = p - g / avg * lr;
  }
}

// torch.optim.Adagrad, with clr the step's decayed rate.
template <class S, class K> void adagrad_update(S& p, S g, S& sum, const K& clr, const AdagradOptions& o) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) g = g + p * N(o.weight_decay);
  sum = sum + g * g;
  p = p - g / (sqrt(sum) + N(o.eps)) * clr;
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, double lr, RmspropOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(o.alpha >= 0 && o.eps >= 0 && o.momentum >= 0 && o.weight_decay >= 0,
             "RMSprop: alpha, eps, momentum and weight_decay must be non-negative");
  for (size_t i = 0; i < params_.size(); ++i) {
    square_avg_.push_back(zeros_like(params_[i]));
    if (o.momentum > 0) momentum_buffer_.push_back(zeros_like(params_[i]));
    if (o.centered) grad_avg_.push_back(zeros_like(params_[i]));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    register_state(fmt::format("state.{}.square_avg", i), square_avg_[i]);
    if (o.momentum > 0) register_state(fmt::format("state.{}.momentum_buffer", i), momentum_buffer_[i]);
    if (o.centered) register_state(fmt::format("state.{}.grad_avg", i), grad_avg_[i]);
  }
}

void RMSprop::step() {
  run_step([this] { update(); });
}

void RMSprop::update() {
  NoGradGuard no_grad;
  Plan plan = make_plan(params_, square_avg_, momentum_buffer_, grad_avg_);
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>();
    // The fused pass hands the state in make_plan's order, skipping none: absent lists leave
    // their slot null, and the rule ignores what its options do not keep.
    run_fused(plan, float(lr), lr, [&](auto k) {
      return [k, this](auto& p, auto g, auto& sq, auto& b, auto& ga) {
        if (opt_.momentum > 0) rmsprop_update(p, g, sq, b, ga, k, opt_);
        else rmsprop_update(p, g, sq, ga, b, k, opt_);  // without momentum, slot 1 is grad_avg's
      };
    });
  }
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    Tensor new_p = p, sq = square_avg_[i];
    Tensor b = opt_.momentum > 0 ? momentum_buffer_[i] : Tensor(), ga = opt_.centered ? grad_avg_[i] : Tensor();
    rmsprop_update(new_p, p.grad(), sq, b, ga, lr_as(p.dtype()), opt_);
    square_avg_[i].copy_(sq);
    if (opt_.momentum > 0) momentum_buffer_[i].copy_(b);
    if (opt_.centered) grad_avg_[i].copy_(ga);
    p.copy_(new_p);
  }
}

Adagrad::Adagrad(std::vector<Tensor> params, double lr, AdagradOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(o.lr_decay >= 0 && o.weight_decay >= 0 && o.initial_accumulator_value >= 0 && o.eps >= 0,
             "Adagrad: lr_decay, weight_decay, initial_accumulator_value and eps must be non-negative");
  for (const Tensor& p : params_) sum_.push_back(full_like(p, o.initial_accumulator_value));
  steps_ = zeros({}, DType::F64);
  register_state("step", steps_);
  for (size_t i = 0; i < params_.size(); ++i) register_state(fmt::format("state.{}.sum", i), sum_[i]);
}

void Adagrad::step() {
  run_step([this] { update(); });
}

void Adagrad::update() {
  NoGradGuard no_grad;
  steps_.add_(1);
  Plan plan = make_plan(params_, sum_, {});
  if (!plan.slots.empty()) {
    double clr = lr_tensor_.item<double>() / (1 + (steps_.item<double>() - 1) * opt_.lr_decay);
    run_fused(plan, float(clr), clr, [&](auto k) {
      return [k, this](auto& p, auto g, auto& s, auto&, auto&) { adagrad_update(p, g, s, k, opt_); };
    });
  }
  if (plan.tensor_path.empty()) return;
  Tensor clr = lr_tensor_ / ((steps_ - 1.0) * opt_.lr_decay + 1.0);
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    Tensor new_p = p, s = sum_[i];
    adagrad_update(new_p, p.grad(), s, clr.to(p.dtype()), opt_);
    sum_[i].copy_(s);
    p.copy_(new_p);
  }
}

}  // namespace kiln::optim
