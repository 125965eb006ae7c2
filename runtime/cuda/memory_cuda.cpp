// runtime/cuda/memory_cuda.cpp -- device memory (the caching allocator over cuMemAlloc and
// events) and page-locked host memory (cached, each block reused only after the copies that
// used it have run).
#include <fmt/format.h>

#include <bit>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"

namespace kiln::cuda {
namespace {

// One device's raw memory and events, for its CachingAllocator.
class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(int index) : index_(index) {}
  void* malloc(size_t bytes) override {
    bind(index_, "cuda allocator");
    CUdeviceptr p = 0;
    CUresult r = driver()->cuMemAlloc(&p, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    check(r, "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void free(void* p) override {
    bind(index_, "cuda allocator");
    check(driver()->cuMemFree(reinterpret_cast<CUdeviceptr>(p)), "cuMemFree");
  }
  EventHandle record_event(StreamHandle stream) override {
    bind(index_, "cuda allocator");
    CUevent e = nullptr;
    check(driver()->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    check(driver()->cuEventRecord(e, reinterpret_cast<CUstream>(stream)), "cuEventRecord");
    return reinterpret_cast<EventHandle>(e);
  }
  bool event_done(EventHandle e) override {
    bind(index_, "cuda allocator");
    CUresult r = driver()->cuEventQuery(reinterpret_cast<CUevent>(e));
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuEventQuery");
    return true;
  }
  void synchronize_event(EventHandle e) override {
    bind(index_, "cuda allocator");
    check(driver()->cuEventSynchronize(reinterpret_cast<CUevent>(e)), "cuEventSynchronize");
  }
  void destroy_event(EventHandle e) override {
    bind(index_, "cuda allocator");
    check(driver()->cuEventDestroy(reinterpret_cast<CUevent>(e)), "cuEventDestroy");
  }
  StreamHandle current_stream() override { return reinterpret_cast<StreamHandle>(current(index_)); }
  void mem_info(size_t* free, size_t* total) override {
    *free = *total = 0;
    bind(index_, "cuda allocator");
    driver()->cuMemGetInfo(free, total);
  }
  std::string name() const override { return fmt::format("cuda:{}", index_); }

 private:
  int index_;
};

// Page-locked host blocks in power-of-two sizes. A block a copy used (record_pinned_use) goes
// back to its free list only when the events recorded for those copies have completed.
class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    size_t size = std::bit_ceil(std::max<size_t>(nbytes, 512));
    std::lock_guard<std::mutex> lock(mu_);
    collect();
    ++stats_.allocations;
    std::vector<void*>& list = free_[size];
    void* p = nullptr;
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
      ++stats_.cache_hits;
      stats_.cached -= static_cast<int64_t>(size);
    } else {
      require_driver("pin_memory");
      // The calling thread's device: binding GPU 0 would make a context there in every process
      // (each DDP rank's, refused under exclusive-process mode). The block is portable anyway.
      bind(current_device(), "pin_memory");
      CUresult r = driver()->cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        release();
        r = driver()->cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE);
      }
      check(r, "cuMemHostAlloc");
      ++stats_.system_allocs;
      stats_.reserved += static_cast<int64_t>(size);
    }
    blocks_[p] = Block{size, {}};
    stats_.in_use += static_cast<int64_t>(size);
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    return p;
  }

  void deallocate(void* p, size_t) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(p);
    KILN_ASSERT(it != blocks_.end());
    Block& b = it->second;
    stats_.in_use -= static_cast<int64_t>(b.size);
    stats_.cached += static_cast<int64_t>(b.size);
    if (b.events.empty()) {
      free_[b.size].push_back(p);
      blocks_.erase(it);
    } else {
      pending_.push_back(p);
    }
  }

  void record_use(const void* p, CUstream stream, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.upper_bound(const_cast<void*>(p));
    if (it == blocks_.begin()) return;
    --it;
    if (static_cast<const char*>(p) >= static_cast<char*>(it->first) + it->second.size) return;
    // The copies that have run need no event: a long-lived staging block keeps one per copy in
    // flight, not one per copy it ever made.
    std::erase_if(it->second.events, [](const std::pair<CUevent, int>& e) {
      bind(e.second, "pinned memory");
      if (driver()->cuEventQuery(e.first) != CUDA_SUCCESS) return false;
      driver()->cuEventDestroy(e.first);
      return true;
    });
    bind(device, "pinned memory");
    CUevent e = nullptr;
    check(driver()->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    check(driver()->cuEventRecord(e, stream), "cuEventRecord");
    it->second.events.emplace_back(e, device);
  }

  bool contains(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.upper_bound(const_cast<void*>(p));
    if (it == blocks_.begin()) return false;
    --it;
    return static_cast<const char*>(p) < static_cast<char*>(it->first) + it->second.size;
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_in_use = stats_.in_use;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    release();
  }
  void set_cache_limit(int64_t) override {}

 private:
  struct Block {
    size_t size = 0;
    std::vector<std::pair<CUevent, int>> events;  // copies that used it, and their devices
  };

  // Freed blocks whose copies have all run go back to their free lists.
  void collect() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      Block& b = blocks_[*it];
      bool done = true;
      for (auto& [e, device] : b.events) {
        bind(device, "pinned memory");
        CUresult r = driver()->cuEventQuery(e);
        if (r == CUDA_ERROR_NOT_READY) done = false;
      }
      if (!done) {
        ++it;
        continue;
      }
      for (auto& [e, device] : b.events) driver()->cuEventDestroy(e);
      free_[b.size].push_back(*it);
      blocks_.erase(*it);
      it = pending_.erase(it);
    }
  }

  void release() {
    for (void* p : pending_) {
      for (auto& [e, device] : blocks_[p].events) {
        bind(device, "pinned memory");
        check(driver()->cuEventSynchronize(e), "cuEventSynchronize");
      }
    }
    collect();
    for (auto& [size, list] : free_) {
      for (void* p : list) {
        driver()->cuMemFreeHost(p);
        stats_.reserved -= static_cast<int64_t>(size);
        stats_.cached -= static_cast<int64_t>(size);
      }
      list.clear();
    }
  }

  mutable std::mutex mu_;
  std::map<void*, Block> blocks_;  // live and pending blocks, by address
  std::vector<void*> pending_;
  std::map<size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

PinnedAllocator& pinned() {
  static auto* a = new PinnedAllocator;  // never destroyed: pinned tensors outlive statics
  return *a;
}

}  // namespace

CachingAllocator& device_allocator(int index) {
  static std::mutex mu;
  static auto* allocators = new std::vector<std::unique_ptr<CachingAllocator>>;  // never destroyed
  bind(index, "cuda allocator");                                                 // checks the index
  std::lock_guard<std::mutex> lock(mu);
  auto i = static_cast<size_t>(index);
  if (allocators->size() <= i) allocators->resize(i + 1);
  if (!(*allocators)[i]) (*allocators)[i] = std::make_unique<CachingAllocator>(std::make_unique<CudaMemory>(index));
  return *(*allocators)[i];
}

Allocator& pinned_allocator() { return pinned(); }

Allocator& pinned_memory_allocator() {
  require_driver("pin_memory");
  return pinned();
}

bool is_pinned(const void* p) { return is_pinned_pointer(p); }

void record_pinned_use(const void* p, CUstream stream, int device) { pinned().record_use(p, stream, device); }

bool is_pinned_pointer(const void* p) { return driver() && pinned().contains(p); }

AllocatorStats memory_stats(int index) { return device_allocator(resolve(index)).stats(); }

void reset_peak_memory_stats(int index) { device_allocator(resolve(index)).reset_peak(); }

void empty_cache() {
  for (int i = 0; i < device_count(); ++i) device_allocator(i).empty_cache();
  if (driver()) pinned().empty_cache();
}

}  // namespace kiln::cuda
