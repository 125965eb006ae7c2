// nn/optim.cpp -- optimizer updates, in place under NoGradGuard.
#include "nn/optim.h"

#include <cmath>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), lr_(lr), lr_tensor_(full({}, lr, DType::F64)) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(),
               "optimizer: parameter {} must be a leaf that requires grad", i);
}

void Optimizer::set_lr(double lr) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  lr_ = lr;
  NoGradGuard no_grad;
  lr_tensor_.fill_(lr);
}

Tensor Optimizer::lr_as(DType dtype) const { return lr_tensor_.to(dtype); }

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

SGD::SGD(std::vector<Tensor> params, double lr, SgdOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
             "SGD: nesterov needs momentum > 0 and dampening 0");
  if (o.momentum != 0)
    for (const Tensor& p : params_) velocity_.push_back(zeros_like(p));
  steps_ = zeros({}, DType::F64);
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (opt_.weight_decay != 0) g = g + p * opt_.weight_decay;
    if (opt_.momentum != 0) {
      Tensor& v = velocity_[i];
      Tensor next = v * opt_.momentum + g * (1 - opt_.dampening);
      if (opt_.dampening != 0) next = where(steps_ == 0, g, next);  // the first step: v = g
      v.copy_(next);
      g = opt_.nesterov ? g + v * opt_.momentum : v;
    }
    p.sub_(g * lr_as(p.dtype()));
  }
  steps_.add_(1);
}

Adam::Adam(std::vector<Tensor> params, double lr, AdamOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps >= 0,
             "Adam: betas must be in [0, 1) and eps >= 0");
  for (const Tensor& p : params_) {
    m_.push_back(zeros_like(p));
    v_.push_back(zeros_like(p));
  }
  steps_ = zeros({}, DType::F64);
}

void Adam::step() { update(false); }

void Adam::update(bool decoupled) {
  NoGradGuard no_grad;
  steps_.add_(1);
  Tensor c1 = 1.0 - pow(opt_.beta1, steps_), c2 = 1.0 - pow(opt_.beta2, steps_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DType t = p.dtype();
    if (opt_.weight_decay != 0) {
      if (decoupled) p.mul_(1.0 - lr_as(t) * opt_.weight_decay);
      else g = g + p * opt_.weight_decay;
    }
    m_[i].mul_(opt_.beta1).add_(g * (1 - opt_.beta1));
    v_[i].mul_(opt_.beta2).add_(g * g * (1 - opt_.beta2));
    Tensor denom = sqrt(v_[i] / c2.to(t)) + opt_.eps;
    p.sub_(m_[i] / denom * (lr_as(t) / c1.to(t)));
  }
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : opt_(opt), step_size_(step_size), gamma_(gamma), base_(opt.lr()) {
  KILN_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
}
void StepLR::step() {
  ++epoch_;
  opt_.set_lr(base_ * std::pow(gamma_, static_cast<double>(epoch_ / step_size_)));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : opt_(opt), t_max_(t_max), eta_min_(eta_min), base_(opt.lr()) {
  KILN_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got {}", t_max);
}
void CosineAnnealingLR::step() {
  ++t_;
  // The closed form PyTorch's schedule follows; past t_max it continues along the cosine.
  double c = std::cos(M_PI * static_cast<double>(t_) / static_cast<double>(t_max_));
  opt_.set_lr(eta_min_ + (base_ - eta_min_) * (1 + c) / 2);
}

}  // namespace kiln::optim
