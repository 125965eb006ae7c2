// nn/optimizer.h -- the base of the optimizers (nn/optim.h): parameters, the learning rate and
// momentum a schedule sets, and the optimizer's state for checkpoints.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::jit {
class Function;
}

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
///
/// On CUDA, eagerly, the optimizers here trace their own step on its first call and replay it
/// after: its fused kernels (one per parameter shape), as one CUDA graph, where the Tensor ops
/// would launch a dozen kernels per parameter. Set KILN_FUSION=0 to step op by op.
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
  /// Runs `update`, the step's arithmetic: as is on the CPU or inside a trace; on CUDA as a
  /// function traced on the first step (jit::trace) and called on every step.
  void run_step(const std::function<void()>& update);
  /// The learning rate as a 0-d tensor of `dtype`, for the update arithmetic.
  Tensor lr_as(DType dtype) const;
  std::vector<Tensor> params_;
  double lr_, initial_lr_;
  Tensor lr_tensor_;  // f64[], updated in place by set_lr

 private:
  std::vector<std::pair<std::string, Tensor*>> state_;
  // run_step's functions, by which parameters have a gradient, made on the first such step
  std::map<std::vector<char>, std::shared_ptr<jit::Function>> compiled_steps_;
};

}  // namespace kiln::optim
