// nn/adam.cpp -- torch.optim.Adam's and AdamW's update, in place under NoGradGuard, one rule
// for both (run fused or on Tensors, nn/optim_fused.h).
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

// 1 - beta^t for Adam's two moments, from the step count t and the current beta1 (doubles,
// or f64[] tensors).
template <class N> std::pair<N, N> bias_corrections(const N& t, const N& beta1, const AdamOptions& o) {
  return {1.0 - pow(beta1, t), 1.0 - pow(o.beta2, t)};
}

// Adam's numbers for one step, in the parameters' dtype.
template <class K> struct AdamStep {
  K decay;                   // AdamW with weight decay: p *= 1 - lr weight_decay
  K c2;                      // the second moment's bias correction
  K step_size;               // lr / c1
  K beta1, one_minus_beta1;  // the current beta1 (a schedule may change it)
};

template <class K> AdamStep<K> adam_step(const K& lr, const K& c1, const K& c2, const K& beta1,
                                         const K& one_minus_beta1, const AdamOptions& o, bool decoupled) {
  using N = typename Traits<K>::Number;
  AdamStep<K> k{.decay = {}, .c2 = c2, .step_size = lr / c1, .beta1 = beta1, .one_minus_beta1 = one_minus_beta1};
  if (decoupled && o.weight_decay != 0) k.decay = N(1.0) - lr * N(o.weight_decay);
  return k;
}

// torch.optim.Adam (decoupled: AdamW).
template <class S, class K>
void adam_update(S& p, S g, S& m, S& v, const AdamStep<K>& k, const AdamOptions& o, bool decoupled) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) {
    if (decoupled) p = p * k.decay;
    else g = g + p * N(o.weight_decay);
  }
  m = m * k.beta1 + g * k.one_minus_beta1;
  v = v * N(o.beta2) + g * g * N(1 - o.beta2);
  p = p - m / (sqrt(v / k.c2) + N(o.eps)) * k.step_size;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, double lr, AdamOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps >= 0,
             "Adam: betas must be in [0, 1) and eps >= 0");
  for (const Tensor& p : params_) {
    m_.push_back(zeros_like(p));
    v_.push_back(zeros_like(p));
  }
  steps_ = zeros({}, DType::F64);
  beta1_ = full({}, o.beta1, DType::F64);
  register_state("step", steps_);
  for (size_t i = 0; i < params_.size(); ++i) {
    register_state(fmt::format("state.{}.exp_avg", i), m_[i]);
    register_state(fmt::format("state.{}.exp_avg_sq", i), v_[i]);
  }
}

void Adam::step() {
  run_step([this] { update(false); });
}

void Adam::set_momentum(double beta1) {
  KILN_CHECK(beta1 >= 0 && beta1 < 1, "Adam: beta1 must be in [0, 1), got {}", beta1);
  opt_.beta1 = beta1;
  NoGradGuard no_grad;
  beta1_.fill_(beta1);
}

void Adam::update(bool decoupled) {
  NoGradGuard no_grad;
  steps_.add_(1);
  Plan plan = make_plan(params_, m_, v_);
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>(), b1 = beta1_.item<double>();
    auto [c1, c2] = bias_corrections(steps_.item<double>(), b1, opt_);
    auto k32 = adam_step<float>(float(lr), float(c1), float(c2), float(b1), float(1 - b1), opt_, decoupled);
    auto k64 = adam_step<double>(lr, c1, c2, b1, 1 - b1, opt_, decoupled);
    run_fused(plan, k32, k64, [&](auto k) {
      return [k, decoupled, this](auto& p, auto g, auto& m, auto& v, auto&) {
        adam_update(p, g, m, v, k, opt_, decoupled);
      };
    });
  }
  if (plan.tensor_path.empty()) return;
  auto [c1, c2] = bias_corrections(steps_, beta1_, opt_);
  Tensor one_minus_beta1 = 1.0 - beta1_;
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    DType t = p.dtype();
    AdamStep<Tensor> k =
        adam_step(lr_as(t), c1.to(t), c2.to(t), factor_in(beta1_, t), factor_in(one_minus_beta1, t), opt_, decoupled);
    Tensor new_p = p, m = m_[i], v = v_[i];
    adam_update(new_p, p.grad(), m, v, k, opt_, decoupled);
    m_[i].copy_(m);
    v_[i].copy_(v);
    p.copy_(new_p);
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, AdamWOptions o)
    : Adam(std::move(params), lr, {.beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay}) {}

}  // namespace kiln::optim
