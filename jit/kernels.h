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

namespace kiln::jit {

struct Kernel {
  codegen::KernelFn fn = nullptr;
  std::string symbol;  // kiln_<hash of the source>
};

/// The compiled kernel for `body` with `layout` (compiles at most once per process).
Kernel kernel_for(const ir::Graph& body, const codegen::KernelLayout& layout);
/// The source kernel_for compiles for `body` and `layout` (kiln-ir codegen prints it).
std::string kernel_source(const ir::Graph& body, const codegen::KernelLayout& layout, std::string* symbol = nullptr);

}  // namespace kiln::jit
