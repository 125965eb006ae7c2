// nn/optimizer.cpp -- the optimizers' base: parameters, the learning rate, the momentum a
// schedule may cycle, zero_grad, and the state by name (state_dict, load_state_dict).
#include "nn/optimizer.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "jit/trace.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/recorder.h"

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), lr_(lr), initial_lr_(lr), lr_tensor_(full({}, lr, DType::F64)) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(),
               "optimizer: parameter {} must be a leaf that requires grad", i);
  register_state("lr", lr_tensor_);
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : state_) out[name] = *t;
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  NoGradGuard no_grad;
  std::vector<std::string> missing, unexpected;
  std::map<std::string, Tensor> mine = state_dict();
  for (const auto& [n, t] : mine)
    if (!state.count(n)) missing.push_back(n);
  for (const auto& [n, t] : state)
    if (!mine.count(n)) unexpected.push_back(n);
  KILN_CHECK(missing.empty() && unexpected.empty(), "optimizer load_state_dict: missing [{}], unexpected [{}]",
             fmt::join(missing, ", "), fmt::join(unexpected, ", "));
  for (auto& [n, t] : mine) {
    const Tensor& src = state.at(n);
    KILN_CHECK(src.defined() && src.shape() == t.shape(),
               "optimizer load_state_dict: \"{}\" is {} here but {} in the state", n, t.type().str(),
               src.defined() ? src.type().str() : "undefined");
    t.copy_(src);
  }
  lr_ = lr_tensor_.item<double>();
}

void Optimizer::set_lr(double lr) {
  KILN_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got {}", lr);
  lr_ = lr;
  NoGradGuard no_grad;
  lr_tensor_.fill_(lr);
}

// The gradients are the traced function's arguments (a gradient read from grad() would be
// captured as the tensor of the first step), set as the parameters' grad() before the update
// reads them; which parameters have one picks the function.
void Optimizer::run_step(const std::function<void()>& update) {
  bool on_cuda = std::any_of(params_.begin(), params_.end(), [](const Tensor& p) { return p.device().is_cuda(); });
  if (!on_cuda || active_recorder() || !jit::fusion_enabled()) return update();
  std::vector<char> has_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params_) {
    has_grad.push_back(p.grad().defined());
    if (has_grad.back()) grads.push_back(p.grad());
  }
  std::shared_ptr<jit::Function>& f = compiled_steps_[has_grad];
  if (!f)
    f = std::make_shared<jit::Function>(
        [this, update, has_grad](std::span<const Tensor> in) {
          for (size_t i = 0, k = 0; i < params_.size(); ++i)
            if (has_grad[i]) params_[i].set_grad(in[k++]);
          update();
          // The gradients the step was given go back after the call: left set here, they
          // would be outputs of the function, each call copying every one of them.
          for (size_t i = 0; i < params_.size(); ++i)
            if (has_grad[i]) params_[i].set_grad(Tensor());
          return std::vector<Tensor>{};
        },
        "optimizer_step");
  f->call(grads);
  for (size_t i = 0, k = 0; i < params_.size(); ++i)
    if (has_grad[i]) params_[i].set_grad(grads[k++]);
}

Tensor Optimizer::lr_as(DType dtype) const { return lr_tensor_.to(dtype); }

double Optimizer::momentum() const {
  throw Error("optimizer: this optimizer has no momentum a schedule can cycle (SGD's momentum and Adam's beta1 can)");
}
void Optimizer::set_momentum(double) { momentum(); }

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

}  // namespace kiln::optim
