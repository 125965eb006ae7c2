// runtime/cuda/context_cuda.h -- what the CUDA files share: each device's context, stream pool
// and allocator, and the calling thread's current device and streams. Internal.
#pragma once

#include <cuda.h>

#include "runtime/caching_allocator.h"
#include "runtime/cuda.h"
#include "runtime/cuda/driver_cuda.h"
#include "runtime/cuda/handles_cuda.h"

namespace kiln::cuda {

/// Device `index`, checked against device_count(), with its primary context current on the
/// calling thread (every driver call needs it). Throws kiln::Error naming `what`.
CUcontext bind(int index, const char* what);

/// Attribute `a` of device `index`; throws kiln::Error naming `what`.
int attribute(int index, CUdevice_attribute a, const char* what);

/// The device index: -1 means the calling thread's current device.
int resolve(int index);

/// The thread's current stream on device `index` (its handle; 0 is the default stream).
CUstream current(int index);

/// Device `index`'s caching allocator (made on first use).
CachingAllocator& device_allocator(int index);

/// Runs `attempt` (a library call taking device memory outside the caching allocator: a
/// handle, a module, a communicator); when `out_of_memory(result)`, frees device `index`'s
/// cached blocks and runs it once more (runtime/cuda/handles_cuda.h).
template <class Attempt, class IsOutOfMemory>
auto retry_out_of_memory(int index, Attempt attempt, IsOutOfMemory out_of_memory) {
  return retry_after_freeing_cache(attempt, out_of_memory, [index] { device_allocator(index).empty_cache(); });
}

/// Whether kiln is capturing `stream` (a CUstream's handle) into a CUDA graph.
bool is_capturing(uintptr_t stream);

/// Page-locked host memory (cuMemHostAlloc), cached: what pin_memory() returns, and what async
/// copies to and from the host need. Blocks used by a copy are reused only after it has run.
Allocator& pinned_allocator();
/// Marks pinned block `p` as used by the work queued on `stream` so far.
void record_pinned_use(const void* p, CUstream stream, int device);
/// Whether `p` lies in a block of the pinned allocator.
bool is_pinned_pointer(const void* p);

}  // namespace kiln::cuda
