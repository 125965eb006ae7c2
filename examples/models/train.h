// examples/models/train.h -- the training loop the example models share. A Task is a model
// with its data: it gives batches (inputs, then targets), the loss of a batch, and the forward
// to save. train() runs optimizer steps on it, eagerly or as one traced whole step (forward,
// backward and update in one compiled graph); save_forward() writes the trained forward with
// jit::save for another process to load.
#pragma once

#include <kiln/kiln.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln::examples {

class Task {
 public:
  virtual ~Task() = default;
  virtual nn::Module& model() = 0;
  /// Batch number `step`: the inputs, then the targets.
  virtual std::vector<Tensor> batch(int64_t step) = 0;
  /// The scalar loss of a batch (called in train mode).
  virtual Tensor loss(std::span<const Tensor> batch) = 0;
  /// How many of a batch's tensors the forward takes (its first ones).
  virtual size_t forward_arity() const { return 1; }
  /// The forward on those inputs: what a loaded module serves.
  virtual std::vector<Tensor> forward(std::span<const Tensor> inputs) = 0;
};

/// Throws kiln::Error(what) unless ok: a bad argument or file, said plainly.
inline void require(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

/// The number of trainable values (a tied weight counted once, as parameters() lists it).
inline int64_t parameter_count(nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

struct TrainOptions {
  int64_t steps = 20;
  bool traced = false;    // one compiled graph per step instead of eager ops
  int64_t log_every = 0;  // print every so many steps (0: never)
  bool profile = false;   // record the steps after the first (which compiles) with kiln's profiler
  Device device = cpu;    // where the batches go (the model and optimizer must be there already)
  std::string trace = "";  // with profile: where the recording goes as a Perfetto trace ("": none)
};

/// Batch `step` of `task` on `device` (tasks make their batches on the CPU).
inline std::vector<Tensor> batch_on(Task& task, int64_t step, Device device) {
  std::vector<Tensor> b = task.batch(step);
  for (Tensor& x : b) x = x.to(device);
  return b;
}

/// One optimizer step on a batch: zero_grad, the loss, backward, step. Returns {the loss}
/// (the form jit::trace_tensors takes, so the same function runs eagerly or traced).
inline std::vector<Tensor> train_step(Task& task, optim::Optimizer& opt, std::span<const Tensor> batch) {
  opt.zero_grad();
  Tensor loss = task.loss(batch);
  loss.backward();
  opt.step();
  return {loss.detach()};
}

/// Trains `task` for options.steps steps of `opt` (a scheduler steps after each, when given);
/// returns each step's loss.
inline std::vector<double> train(Task& task, optim::Optimizer& opt, const TrainOptions& options,
                                 optim::LRScheduler* schedule = nullptr) {
  task.model().train();
  auto step = [&](std::span<const Tensor> batch) { return train_step(task, opt, batch); };
  std::optional<jit::Function> traced;
  std::vector<double> losses;
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < options.steps; ++i) {
    if (options.profile && i == 1) profiler::start();
    std::vector<Tensor> batch = batch_on(task, i, options.device);
    if (options.traced && !traced) traced = jit::trace_tensors(step, batch, "train_step");
    Tensor loss = traced ? traced->call(batch)[0] : step(batch)[0];
    if (schedule) schedule->step();
    losses.push_back(loss.item<double>());
    if (options.log_every > 0 && ((i + 1) % options.log_every == 0 || i + 1 == options.steps)) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("step %5lld  loss %.4f  %.1f ms/step\n", static_cast<long long>(i + 1), losses.back(),
                  1e3 * s / double(i + 1));
      std::fflush(stdout);
    }
  }
  if (options.profile && options.steps > 1) profiler::stop(options.trace);
  return losses;
}

/// The task's forward in eval mode, traced on the first inputs of `batch` and saved to `path`
/// with `options` (dynamic dims, names).
inline void save_forward(Task& task, std::span<const Tensor> batch, const std::string& path,
                         const jit::SaveOptions& options = {}) {
  task.model().eval();
  NoGradGuard no_grad;
  std::vector<Tensor> inputs(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(task.forward_arity()));
  jit::ParamNames names;  // the saved parameters keep the model's state_dict names
  for (auto& [n, t] : task.model().named_parameters()) names.emplace_back(n, t);
  for (auto& [n, t] : task.model().named_buffers()) names.emplace_back(n, t);
  jit::Function forward([&task](std::span<const Tensor> in) { return task.forward(in); }, "forward", names);
  forward.call(inputs);
  jit::save(forward, path, options);
  task.model().train();
}

}  // namespace kiln::examples
