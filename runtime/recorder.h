// runtime/recorder.h -- the hook a tracer uses to see ops instead of running them.
#pragma once

#include <span>

#include "runtime/op.h"

namespace kiln {

/// While a Recorder is active on this thread, apply() checks types and hands each op to it
/// instead of running a kernel. jit/ implements it; the runtime never sees the IR.
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual Tensor record(OpId id, std::span<const Tensor> in, const Attrs& attrs,
                        const TensorType& type) = 0;
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
