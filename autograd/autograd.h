// autograd/autograd.h -- reverse-mode automatic differentiation over the eager tape.
//
// Every op applied to a tensor that requires grad is recorded (runtime/apply.cpp); backward()
// walks the records from the output, running each op's vjp (written with Tensor ops next to
// the op, runtime/ops/*.cpp) and summing each gradient back to its input's shape.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "runtime/autograd_meta.h"
#include "runtime/tensor.h"

namespace kiln {

/// Turns off recording for a scope, like torch::NoGradGuard (optimizer updates, evaluation).
struct NoGradGuard : GradModeGuard {
  NoGradGuard() : GradModeGuard(false) {}
};

/// Turns recording back on inside a NoGradGuard.
struct EnableGradGuard : GradModeGuard {
  EnableGradGuard() : GradModeGuard(true) {}
};

bool is_grad_enabled();

namespace autograd {

/// Accumulates d(sum of outputs[i] * grad_outputs[i]) / d(leaf) into every reachable leaf's
/// grad(). grad_outputs may be empty when every output has one element (then 1 is used).
/// retain_graph keeps the saved tensors for another backward; create_graph records the
/// backward pass itself, so its results can be differentiated again (it implies retain_graph).
/// With create_graph, a leaf's grad() holds a graph that holds the leaf: a reference cycle (as
/// in PyTorch) that frees nothing until the grad is reset (x.set_grad({}) or zero_grad()).
void backward(std::span<const Tensor> outputs, std::span<const Tensor> grad_outputs = {}, bool retain_graph = false,
              bool create_graph = false);

/// The gradients of the outputs with respect to `inputs` (leaves or not), returned instead of
/// accumulated into grad(). An input the outputs do not depend on throws unless allow_unused,
/// which returns an undefined tensor for it.
std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> inputs,
                         std::span<const Tensor> grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);
std::vector<Tensor> grad(std::initializer_list<Tensor> outputs, std::initializer_list<Tensor> inputs,
                         std::initializer_list<Tensor> grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

/// Removes a hook when remove() is called (not when the handle is destroyed, as in PyTorch).
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(Tensor leaf, uint64_t id) : leaf_(std::move(leaf)), id_(id) {}
  void remove();

 private:
  Tensor leaf_;
  uint64_t id_ = 0;
};

/// Runs hook(leaf) in every backward() that reaches `leaf` (a tensor that requires grad and
/// no op made), right after the last of that pass's gradients was accumulated into
/// leaf.grad(): PyTorch's register_post_accumulate_grad_hook. Data-parallel training starts a
/// gradient's all-reduce from it while backward goes on. A compiled function's backward fires
/// it as it writes each gradient. Hooks run in registration order, on the thread running
/// backward; autograd::grad(), which accumulates nothing, runs none.
HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook);

/// Queues `callback` to run once the backward pass in progress has finished (after every
/// hook), as PyTorch's Variable._execution_engine.queue_callback. Throws outside backward.
void queue_callback(std::function<void()> callback);

/// Options for gradcheck.
struct GradcheckOptions {
  double eps = 1e-6;  // finite-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 0;  // for the random projection of the output
};

/// Compares the analytical gradient of fn at `inputs` (f64 tensors; those that require grad
/// are checked) with central finite differences, through a random projection of fn's output.
/// Returns "" when they agree, else a message naming the input, element and both values.
std::string gradcheck(const std::function<Tensor(std::span<const Tensor>)>& fn, std::span<const Tensor> inputs,
                      const GradcheckOptions& options = {});

}  // namespace autograd

/// Sums `g` over the dims that broadcasting added or expanded, so it has `shape`.
Tensor sum_to(const Tensor& g, const Dims& shape);

}  // namespace kiln
