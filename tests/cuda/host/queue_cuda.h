// tests/cuda/host/queue_cuda.h -- how the host CUDA's library stand-ins (cuBLAS, cuDNN) queue
// their work on a stream of the host driver (driver_cuda.cpp), in order with everything else.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <functional>

/// Queues `task` on `stream` (0: the current context's default stream); with `kernel`, the
/// host CUPTI records it as that kernel, as a GPU's records the library's kernels.
void kiln_host_enqueue(CUstream stream, std::function<void()> task, const char* kernel = nullptr);
/// Whether [p, p + n) lies in one live allocation of a host device.
bool kiln_host_device_range(const void* p, size_t n);
/// Takes `bytes` of a device's memory (-1: the current one) without allocating it (negative:
/// gives it back): what a library's handle or a module holds on a GPU. False, taking nothing,
/// past the budget.
bool kiln_host_reserve(long long bytes, int device = -1);
/// The calling thread's current device.
int kiln_host_current_device();
