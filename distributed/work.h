// distributed/work.h -- what a Work handle holds: the outcome of an operation a backend's
// worker completes (Gloo), or the event a device's stream records when it has run it (NCCL).
// Internal: the backends make them.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "distributed/process_group.h"
#include "runtime/cuda.h"

namespace kiln::distributed {

// The error is kept as text and thrown anew by each wait(): an exception object is never
// shared between the worker thread and its waiters.
struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, failed = false;
  std::string error;
  /// Set for work on a CUDA stream: complete when the event is; wait() makes the caller's
  /// current stream on `device` wait for it, and returns without blocking the host.
  std::shared_ptr<cuda::Event> event;
  int device = 0;

  void finish(bool f, std::string e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      failed = f;
      error = std::move(e);
    }
    cv.notify_all();
  }
};

}  // namespace kiln::distributed
