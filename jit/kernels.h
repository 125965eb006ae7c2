// jit/kernels.h -- the process-wide kernel cache: fused groups to compiled kernels.
//
// A kernel is keyed by its source, which depends on the group's structure only (ops, dtypes,
// loop rank, broadcast and unit-stride pattern), never on sizes: a new batch size finds its
// kernels compiled. Misses go to the disk cache (jit/disk_cache.h), then to the compiler.
#pragma once

#include <cstdint>
#include <string>

#include "codegen/backend.h"
#include "jit/trace.h"  // KernelCacheStats, kernel_cache_stats()
#include "runtime/cuda_kernels.h"

namespace kiln::jit {

struct Kernel {
  codegen::KernelFn fn = nullptr;
  std::string symbol;  // kiln_<hash of the source>
};

/// The compiled kernel for `body` with `layout` (compiles at most once per process).
Kernel kernel_for(const ir::Graph& body, const codegen::KernelLayout& layout);
/// The source kernel_for compiles for `body` and `layout` (kiln-ir codegen prints it).
std::string kernel_source(const ir::Graph& body, const codegen::KernelLayout& layout, std::string* symbol = nullptr);

/// A CUDA kernel: `source` (whose entry point is named kiln_kernel) compiled by NVRTC for the
/// architecture of device `device` and loaded there, at most once per process and device; the
/// cubin goes through the disk cache, keyed by NVRTC's version and the architecture too.
struct CudaKernel {
  cuda::DeviceFunction fn;
  std::string symbol;  // kiln_<hash of the source>
};
CudaKernel cuda_kernel_for(const std::string& source, int device);
/// `source` with its entry point renamed to the hash of its text (what cuda_kernel_for runs).
std::string named_cuda_source(const std::string& source, std::string* symbol = nullptr);

}  // namespace kiln::jit
