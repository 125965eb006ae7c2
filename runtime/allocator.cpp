// runtime/allocator.cpp -- the caching CPU allocator.
#include "runtime/allocator.h"

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime/error.h"
#include "runtime/profiler.h"

namespace kiln {
namespace {

constexpr size_t kAlign = 64;
constexpr int kSubClasses = 4;  // 2^k, 1.25*2^k, 1.5*2^k, 1.75*2^k: at most 25% waste
constexpr int kNumClasses = 64 * kSubClasses;
constexpr size_t kMaxBytes = size_t{1} << 62;  // beyond this the size classes overflow

std::atomic<void* (*)(size_t, size_t)> g_get{
    [](size_t align, size_t bytes) { return std::aligned_alloc(align, bytes); }};
std::atomic<void (*)(void*)> g_put{[](void* p) { std::free(p); }};

// Size class of a request and the block size that class hands out.
int size_class(size_t n, size_t* block) {
  if (n <= kAlign) {
    *block = kAlign;
    return 0;
  }
  int k = 63 - std::countl_zero(static_cast<uint64_t>(n - 1));  // 2^k < n <= 2^(k+1)
  size_t base = size_t{1} << k, step = base / kSubClasses;
  size_t sub = (n - base + step - 1) / step;  // 1..kSubClasses
  *block = base + sub * step;
  return k * kSubClasses + static_cast<int>(sub);
}

class CachingCpuAllocator final : public Allocator {
 public:
  CachingCpuAllocator() {
    const char* env = std::getenv("KILN_CPU_CACHE_MB");
    if (env) cap_ = static_cast<int64_t>(std::strtoll(env, nullptr, 10)) << 20;
  }
  ~CachingCpuAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    if (nbytes > kMaxBytes)
      throw OutOfMemory(fmt::format("out of memory: {} bytes is more than any allocation can be", nbytes));
    size_t block;
    int c = size_class(nbytes == 0 ? 1 : nbytes, &block);
    void* cached_hit = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.allocations;
      stats_.in_use += static_cast<int64_t>(block);
      if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
      auto& list = free_[c];
      if (!list.empty()) {
        cached_hit = list.back();
        list.pop_back();
        stats_.cached -= static_cast<int64_t>(block);
        ++stats_.cache_hits;
      } else {
        ++stats_.system_allocs;
      }
    }
    if (cached_hit) {
      sample();
      return cached_hit;
    }
    size_t bytes = (block + kAlign - 1) / kAlign * kAlign;  // aligned_alloc wants a multiple
    void* p = g_get.load()(kAlign, bytes);
    if (!p) {  // free what we hold and try once more before giving up
      empty_cache();
      p = g_get.load()(kAlign, bytes);
      if (!p) {
        int64_t in_use;
        {
          std::lock_guard<std::mutex> lock(mu_);
          stats_.in_use -= static_cast<int64_t>(block);
          in_use = stats_.in_use;
        }
        throw OutOfMemory(
            fmt::format("out of memory: cannot allocate {} bytes ({} bytes in use; the allocator "
                        "returned its cached blocks and tried again)",
                        nbytes, in_use));
      }
    }
    sample();
    return p;
  }

  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    size_t block;
    int c = size_class(nbytes == 0 ? 1 : nbytes, &block);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.in_use -= static_cast<int64_t>(block);
      if (stats_.cached + static_cast<int64_t>(block) <= cap_) {
        free_[c].push_back(p);
        stats_.cached += static_cast<int64_t>(block);
        p = nullptr;
      }
    }
    if (p) g_put.load()(p);
    sample();
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    AllocatorStats s = stats_;
    s.cache_limit = cap_;
    s.reserved = s.in_use + s.cached;
    return s;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_in_use = stats_.in_use;
  }

  void set_cache_limit(int64_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cap_ = bytes;
    }
    empty_cache();
  }

  void empty_cache() override {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& list : free_) {
        drop.insert(drop.end(), list.begin(), list.end());
        list.clear();
      }
      stats_.cached = 0;
    }
    for (void* p : drop) g_put.load()(p);
  }

 private:
  // The profiler's memory track (one relaxed load when it is off).
  void sample() {
    if (!profiler::enabled()) return;
    AllocatorStats s = stats();
    profiler::counter("memory", {{"allocated", s.in_use}, {"cached", s.cached}, {"peak", s.peak_in_use}});
  }

  mutable std::mutex mu_;
  std::vector<void*> free_[kNumClasses];
  AllocatorStats stats_;
  int64_t cap_ = int64_t{2048} << 20;
};

}  // namespace

Allocator& cpu_allocator() {
  static auto* a = new CachingCpuAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

SystemMemory set_cpu_system_memory(SystemMemory memory) {
  return {g_get.exchange(memory.get), g_put.exchange(memory.put)};
}

}  // namespace kiln
