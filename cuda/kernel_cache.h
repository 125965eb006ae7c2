// cuda/kernel_cache.h -- CUDA C source to a loaded kernel: NVRTC compiles it for the device's
// architecture once per process and device, the cubin kept in the disk cache (keyed by NVRTC's
// version, its options and the architecture too); counted in jit::kernel_cache_stats().
#pragma once

#include <string>
#include <string_view>

#include "runtime/cuda_internal.h"

namespace kiln::cuda {

struct CompiledKernel {
  DeviceFunction fn;
  std::string symbol;  // kiln_<hash of the source>
};
/// `source` (whose entry point is named kiln_kernel) compiled for device `device` and loaded
/// there; `label` names it for the profiler (the op or fused group it computes: a CUDA graph
/// replays it under no kiln span) when it is first compiled.
CompiledKernel kernel_for(const std::string& source, int device, std::string_view label = {});
/// `source` with its entry point renamed to the hash of its text (what kernel_for runs).
std::string named_source(const std::string& source, std::string* symbol = nullptr);

}  // namespace kiln::cuda
