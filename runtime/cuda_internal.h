// runtime/cuda_internal.h -- the CUDA device runtime's internal API: what the CUDA layer
// (cuda/) and the tests use, not users (they have runtime/cuda.h). The runtime sits below the
// code generators, so it runs no kernel of its own: the CUDA layer hands it one table of op
// kernels when the library loads (cuda/op_table.cpp), as distributed/ installs the collective
// engine. Here too: loading and launching modules, the deferred index checks, graph capture,
// and the device's properties. No CUDA header here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/op.h"

namespace kiln::cuda {

/// Runs one op on CUDA tensors, queued on the current stream of their device. `out` is fresh
/// and contiguous; the inputs are on its device, or 0-d CPU tensors.
using OpKernel = void (*)(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out);
/// dst = src on one CUDA device: src broadcast to dst's shape and converted to its dtype, any
/// strides on either side.
using CopyKernel = void (*)(const Tensor& src, const Tensor& dst);
/// One op and the kernel that runs it.
struct OpKernelEntry {
  OpId op;
  OpKernel kernel;
};
/// Makes `table` the CUDA device's op kernels (an op listed twice: the later entry) and `copy`
/// its device-side copy. The CUDA layer calls it once, when the library loads.
void install_kernels(std::span<const OpKernelEntry> table, CopyKernel copy);
/// The installed kernel of op `id`, or nullptr.
OpKernel op_kernel(OpId id);

/// A kernel of a loaded module, on one device.
struct DeviceFunction {
  uintptr_t function = 0;  // a CUfunction
  int device = -1;
};
/// Loads `image` (a cubin) on device `device` and returns its kernel `name`; the module stays
/// loaded for the process. Throws kiln::Error naming the kernel.
DeviceFunction load_function(int device, const std::string& image, const std::string& name);
/// Queues `f` on the current stream of its device: grid and block sizes in x, y, z, dynamic
/// shared memory in bytes, and a pointer to each argument (cuLaunchKernel's convention).
void launch(const DeviceFunction& f, const unsigned grid[3], const unsigned block[3], size_t shared_bytes, void** args);
/// An eager index op's error flag on `device` (i64[2]: zero, or {1, the bad index} once its
/// kernel met one) for op `op` over a dim of `size`: a slot read at the device's next
/// synchronizing call (runtime/cuda/checks_cuda.cpp), which throws kiln::Error for it.
Tensor deferred_check_flag(int device, const char* op, int64_t size);
/// An error flag like deferred_check_flag's that other work writes (a CUDA graph's replays
/// of a captured gather): read with the eager ones at the device's next synchronizing call, and
/// zeroed after. Pending until then; deferring one that is pending again does nothing.
void defer_check(int device, const Tensor& flag, const char* op, int64_t size);
/// Reads `device`'s pending index checks (waiting for the device); throws for the first bad
/// index. Every call that waits for the device calls it.
void read_deferred_checks(int device);

/// A CUDA graph: the work queued on a stream during a capture, replayed by launch() on any
/// stream of its device. The memory its kernels touch was allocated during the capture from a
/// private pool of the device's caching allocator, and stays the graph's until it is
/// destroyed, which first waits for its replays.
class CapturedGraph {
 public:
  CapturedGraph(int device, uintptr_t exec, uintptr_t pool, uintptr_t stream)
      : device_(device), exec_(exec), pool_(pool), stream_(stream) {}
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  /// Queues the whole graph on the current stream of its device.
  void launch() const;
  int device() const { return device_; }

 private:
  int device_;
  uintptr_t exec_, pool_, stream_;  // a CUgraphExec, the private pool's key, the captured stream
  // The streams it was launched on: the destructor waits for those alone (a device-wide wait
  // would end a capture another thread is making).
  mutable std::mutex mu_;
  mutable std::set<uintptr_t> launched_;
};
/// The calling thread's stream for captures on `device`: made for captures alone (never one of
/// the pool that Stream::create, user code and NCCL share, which wraps around), lent to one
/// thread at a time and given back when it ends, so no other thread queues work on it while it
/// captures.
Stream capture_stream(int device);
/// Starts capturing `stream` (never a default stream: the driver does not capture those):
/// the work queued on it is recorded instead of run, and its allocations come from a new
/// private pool.
void begin_capture(const Stream& stream);
/// Ends the capture: the graph, or nullptr with `*why` when a call during the capture was not
/// allowed in one (the capture is over either way).
std::unique_ptr<CapturedGraph> end_capture(const Stream& stream, std::string* why);

/// The device's compute capability as NVRTC names architectures: 90 for 9.0.
int compute_capability(int device);
/// The device's streaming multiprocessors (to size grids).
int multiprocessor_count(int device);

}  // namespace kiln::cuda
