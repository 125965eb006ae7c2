// jit/kernel_cache.h -- the process-wide kernel cache: fused groups to compiled kernels.
//
// A kernel is keyed by its source, which depends on the group's structure only (ops, dtypes,
// loop rank, broadcast and unit-stride pattern), never on sizes: a new batch size finds its
// kernels compiled. Misses go to the disk cache (jit/disk_cache.h), then to the compiler. The
// CPU's kernels are here; a device's code generator keeps its own memo of this kind (CUDA's:
// cuda/kernel_cache.h), counted in the same kernel_cache_stats().
#pragma once

#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <unordered_map>

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

/// `source` with its entry point, written kiln_kernel(, renamed kiln_<hash of the text>(, so
/// the source stays a function of structure; the new name in `*symbol`.
std::string name_by_hash(std::string source, std::string* symbol);
/// Part of every disk cache identity: object code from another kiln version is never reused.
extern const char* const kKernelFormat;

namespace detail {
/// Counts a lookup in kernel_cache_stats (a hit, or a miss), and how a miss was served.
void count_lookup(bool hit);
void count_made(bool from_disk);
}  // namespace detail

/// Compiled kernels of type T by key, each made at most once per process: the first caller
/// runs `make` (which says whether the disk cache served it), concurrent callers wait for it,
/// later ones find it. A failure reaches every waiting caller, and the key is forgotten.
template <class T> class KernelMemo {
 public:
  T get(const std::string& key, const std::function<T(bool* from_disk)>& make) {
    std::promise<T> promise;
    std::shared_future<T> future;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = kernels_.find(key);
      detail::count_lookup(it != kernels_.end());
      if (it != kernels_.end()) future = it->second;
      else kernels_.emplace(key, promise.get_future().share());
    }
    if (future.valid()) return future.get();  // made, or being made by another thread
    try {
      bool from_disk = false;
      T made = make(&from_disk);
      detail::count_made(from_disk);
      promise.set_value(made);
      return made;
    } catch (...) {
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mu_);
      kernels_.erase(key);
      throw;
    }
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_future<T>> kernels_;
};

}  // namespace kiln::jit
