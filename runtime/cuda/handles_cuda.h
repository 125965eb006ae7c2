// runtime/cuda/handles_cuda.h -- what the CUDA libraries' handles share (cuBLAS, cuBLASLt,
// cuDNN; no CUDA header here, so the unit tests read it too):
// - HandlePool: handles pooled per device, as PyTorch pools them. A thread takes one per
//   device at its first call and gives it back when it ends, so threads that come and go reuse
//   handles instead of each leaking one (and its memory). A handle is one thread's at a time;
//   it holds no memory tied to a stream that a later thread could disturb: cuBLAS's workspace
//   is its stream's, set at each call, cuDNN's and cuBLASLt's come from the caching
//   allocator per call.
// - retry_after_freeing_cache: device memory a library takes itself (a handle, a module, a
//   communicator) does not come through the caching allocator, so its out of memory does not
//   free the cache. This frees it and tries once more, as the allocator does for its own.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace kiln::cuda {

/// Runs `attempt`; when `out_of_memory(result)`, calls `free_cache` and runs it once more.
/// Returns the last result.
template <class Attempt, class IsOutOfMemory>
auto retry_after_freeing_cache(Attempt attempt, IsOutOfMemory out_of_memory, const std::function<void()>& free_cache) {
  auto result = attempt();
  if (!out_of_memory(result)) return result;
  free_cache();
  return attempt();
}

/// Handles of type H per device, lent to threads. One pool per handle type (its lease is a
/// thread_local of the instantiation, which remembers the first pool a thread used). Pools live
/// for the process: make them with new (a test's may go once the threads that used it ended).
template <class H> class HandlePool {
 public:
  /// `create(device)` makes a handle for the calling thread's bound device.
  explicit HandlePool(std::function<H(int)> create) : create_(std::move(create)) {}

  /// The calling thread's handle for `device`: the one it holds, else a free one, else a new
  /// one. Given back when the thread ends.
  H get(int device) {
    thread_local Lease lease;
    if (!lease.pool) lease.pool = this;
    auto it = lease.held.find(device);
    if (it != lease.held.end()) return it->second;
    H h{};
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<H>& free = free_[device];
      if (!free.empty()) {
        h = free.back();
        free.pop_back();
      }
    }
    if (!h) {
      h = create_(device);
      std::lock_guard<std::mutex> lock(mu_);
      all_.push_back(h);  // reachable while a thread holds it, for the leak checker
    }
    lease.held[device] = h;
    return h;
  }

  /// Handles made so far (each is either held by a thread or free).
  int64_t made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(all_.size());
  }

 private:
  struct Lease {
    HandlePool* pool = nullptr;
    std::map<int, H> held;
    ~Lease() {
      if (!pool) return;
      std::lock_guard<std::mutex> lock(pool->mu_);
      for (auto& [device, h] : held) pool->free_[device].push_back(h);
    }
  };

  std::function<H(int)> create_;
  mutable std::mutex mu_;
  std::map<int, std::vector<H>> free_;
  std::vector<H> all_;
};

}  // namespace kiln::cuda
