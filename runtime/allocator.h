// runtime/allocator.h -- device memory behind an interface; the CPU one caches freed blocks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

/// Counters every allocator keeps (bytes unless named otherwise).
struct AllocatorStats {
  int64_t in_use = 0;         // handed out and not yet returned
  int64_t peak_in_use = 0;    // high-water mark of in_use
  int64_t cached = 0;         // returned, kept for reuse
  int64_t reserved = 0;       // held from the system or device: in use + cached
  int64_t allocations = 0;    // calls to allocate
  int64_t cache_hits = 0;     // allocations served from the cache
  int64_t system_allocs = 0;  // allocations that went to the system
  int64_t cache_limit = 0;    // most bytes kept for reuse
};

/// Memory for one device. Blocks are 64-byte aligned. Devices with streams use the caching
/// allocator of runtime/caching_allocator.h (size classes, per-stream reuse, free-and-retry on
/// out-of-memory).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
  /// Block `p` is used by work on `stream` (a device stream's handle) besides the one it was
  /// allocated for: when freed, it is reused only after that work has run. Nothing to do for
  /// a device without streams.
  virtual void record_stream(void* p, uintptr_t stream) {}
  virtual AllocatorStats stats() const = 0;
  /// Restarts peak_in_use from in_use (to measure the peak of one stretch of work).
  virtual void reset_peak() = 0;
  /// Returns every cached block to the system.
  virtual void empty_cache() = 0;
  /// Caps the bytes kept for reuse (0: keep nothing, every free goes to the system).
  virtual void set_cache_limit(int64_t bytes) = 0;
};

/// The CPU allocator: a caching allocator with size classes (a freed block is kept and handed
/// out again for a request of the same class), so large eager temporaries don't cost page
/// faults on every op. KILN_CPU_CACHE_MB caps what it keeps (default 2048); 0 turns caching off.
Allocator& cpu_allocator();

/// Where the CPU allocator gets memory from the system and gives it back (std::aligned_alloc
/// and std::free by default). Tests swap it to inject a failing allocation; returns the one it
/// replaces. A `get` that returns nullptr is out of memory: the allocator empties its cache,
/// asks once more, then throws kiln::OutOfMemory.
struct SystemMemory {
  void* (*get)(size_t align, size_t bytes);
  void (*put)(void* p);
};
SystemMemory set_cpu_system_memory(SystemMemory memory);

}  // namespace kiln
