// runtime/recorder.h -- the hook a tracer uses to see ops instead of running them.
#pragma once

#include <span>
#include <string>

#include "runtime/op.h"

namespace kiln {

/// While a Recorder is active on this thread, apply() checks types and hands each op to it
/// instead of running a kernel. jit/ implements it; the runtime never sees the IR.
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual Tensor record(OpId id, std::span<const Tensor> in, const Attrs& attrs, const TensorType& type) = 0;
  /// An in-place write of `value` (already of self's type) into `self`.
  virtual void record_assign(const Tensor& self, const Tensor& value) = 0;
  /// `to` is a new handle on the data of `from` (detach): the same value in the trace.
  virtual void alias(const Tensor& from, const Tensor& to) = 0;
  /// Storage allocated while tracing: tensors on it are literals of the trace.
  virtual void on_new_storage(const Storage* s) = 0;
  /// `t`'s grad() is about to be replaced (set_grad, zero_grad): a tracer notes the gradient
  /// it had before the traced function touched it.
  virtual void on_grad_change(const Tensor& t) {}
  /// backward() ran and consumed the graph (no retain_graph, no create_graph): the traced
  /// function used up its own gradients, so a call needs no tape of its own.
  virtual void on_backward() {}
  /// A custom autograd function (autograd/function.h) recorded its node: its backward is the
  /// user's, which a trace takes only by tracing the function's backward (a joint trace or
  /// a whole step), never by taping the call's ops.
  virtual void on_custom_function(const std::string& name) {}
  /// The generator's state for a draw of n numbers inside the trace (a value of the graph,
  /// i64[2]); without an override, drawing while recording throws.
  virtual Tensor random_state(int64_t n);
  /// What `t` is in the trace, for error messages ("the result of sum at train.cpp:12").
  virtual std::string describe(const TensorImpl* t) = 0;
};

Recorder* active_recorder();
/// Installs `r` for this thread until the guard is destroyed (guards nest).
class RecorderGuard {
 public:
  explicit RecorderGuard(Recorder* r);
  ~RecorderGuard();
  RecorderGuard(const RecorderGuard&) = delete;
  RecorderGuard& operator=(const RecorderGuard&) = delete;

 private:
  Recorder* prev_;
};

}  // namespace kiln
