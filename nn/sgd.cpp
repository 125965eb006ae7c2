// nn/sgd.cpp -- torch.optim.SGD's update, in place under NoGradGuard, its rule written once
// (run fused or on Tensors, nn/optim_fused.h).
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

// SGD's numbers for one step, in the parameters' dtype.
template <class K> struct SgdStep {
  K lr;
  typename Traits<K>::Flag first;  // the first step: the velocity starts as the gradient
  K momentum;                      // the current momentum (a schedule may change it)
};

// torch.optim.SGD: v = momentum v + (1 - dampening) g; p -= lr (nesterov ? g + momentum v : v).
// Whether there is momentum at all is the options' (it decides the state); its value is k's.
template <class S, class K> void sgd_update(S& p, S g, S& v, const SgdStep<K>& k, const SgdOptions& o) {
  using N = typename Traits<S>::Number;
  if (o.weight_decay != 0) g = g + p * N(o.weight_decay);
  if (o.momentum != 0) {
    S next = v * k.momentum + g * N(1 - o.dampening);
    if (o.dampening != 0) next = pick(k.first, g, next);  // (undamped, v = 0 gives v = g)
    v = next;
    g = o.nesterov ? g + v * k.momentum : v;
  }
  p = p - g * k.lr;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, double lr, SgdOptions o) : Optimizer(std::move(params), lr), opt_(o) {
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0 and dampening 0");
  if (o.momentum != 0)
    for (const Tensor& p : params_) velocity_.push_back(zeros_like(p));
  steps_ = zeros({}, DType::F64);
  momentum_ = full({}, o.momentum, DType::F64);
  register_state("step", steps_);
  for (size_t i = 0; i < velocity_.size(); ++i)
    register_state(fmt::format("state.{}.momentum_buffer", i), velocity_[i]);
}

void SGD::set_momentum(double momentum) {
  KILN_CHECK(opt_.momentum != 0,
             "SGD: made without momentum, it has no momentum buffers to cycle (give it "
             "SgdOptions{{.momentum = ...}})");
  KILN_CHECK(momentum >= 0, "SGD: momentum must be non-negative, got {}", momentum);
  opt_.momentum = momentum;
  NoGradGuard no_grad;
  momentum_.fill_(momentum);
}

void SGD::step() {
  run_step([this] { update(); });
}

void SGD::update() {
  NoGradGuard no_grad;
  Plan plan = make_plan(params_, velocity_, {});
  if (!plan.slots.empty()) {
    double lr = lr_tensor_.item<double>(), m = momentum_.item<double>();
    bool first = steps_.item<double>() == 0;
    run_fused(plan, SgdStep<float>{float(lr), first, float(m)}, SgdStep<double>{lr, first, m}, [&](auto k) {
      return [k, this](auto& p, auto g, auto& v, auto&, auto&) { sgd_update(p, g, v, k, opt_); };
    });
  }
  for (size_t i : plan.tensor_path) {
    Tensor& p = params_[i];
    SgdStep<Tensor> k{lr_as(p.dtype()), {}, opt_.momentum != 0 ? factor_in(momentum_, p.dtype()) : Tensor()};
    if (opt_.momentum != 0 && opt_.dampening != 0) k.first = steps_ == 0;
    Tensor new_p = p, v = opt_.momentum != 0 ? velocity_[i] : Tensor();
    sgd_update(new_p, p.grad(), v, k, opt_);
    if (opt_.momentum != 0) velocity_[i].copy_(v);
    p.copy_(new_p);
  }
  steps_.add_(1);
}

}  // namespace kiln::optim
