// tests/cuda/host/activity_cuda.h -- the host CUDA's activity log (cupti_cuda.cpp): what its
// CUPTI records of the work its streams run. The driver (driver_cuda.cpp) and the library
// stand-ins tag each piece of work they queue; a tagged task, when it runs while recording,
// leaves a CUPTI record with its start and end on the host's clock (steady_clock), which is
// the host CUPTI's timestamp clock too. A task replayed from a graph is recorded with the
// graph's id and the correlation id of the cuGraphLaunch that replayed it, as on a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace host_cupti {

enum class Work : uint8_t { Kernel, Memcpy, Memset };

/// What a queued task is.
struct Tag {
  Work kind = Work::Kernel;
  std::string name;  // a kernel's
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned shared = 0;
  uint64_t bytes = 0;
  uint8_t copy_kind = 0;  // CUpti_ActivityMemcpyKind
  int device = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;  // of the call that queued it (0: queued while not recording)
};

/// At a driver call that queues work: its correlation id, recording the calling thread's
/// external correlation id for it; 0 when nothing records.
uint32_t begin_call();
/// `task`, recording its activity as `tag` when it runs while recording.
std::function<void()> tagged(Tag tag, std::function<void()> task);
/// Runs a graph's `task` as replayed by the cuGraphLaunch of `correlation` (graph `graph`).
void run_replayed(uint32_t graph, uint32_t correlation, const std::function<void()>& task);

}  // namespace host_cupti
