// runtime/caching_allocator.h -- the device caching allocator of the PyTorch paper, written over
// a raw memory provider so that its logic runs and is tested without a device
// (tests/unit/caching_allocator_test.cpp drives it with a fake provider; the CUDA backend gives
// it cuMemAlloc, cuMemFree and events).
//
// - Per-stream pools. A block freed on stream S is handed out again only for work on S, which
//   stream order makes safe without waiting. A block that other streams used too
//   (record_stream) goes back to its pool only when events recorded on those streams at free
//   time say that their work on it is done.
// - Two size classes. Sizes round up to 512 bytes. Requests up to 1 MiB share 2 MiB segments
//   (the small pool); larger ones come from 20 MiB segments, or below 10 MiB, from a segment of
//   their own rounded to 2 MiB (the large pool).
// - Best fit within a pool. A block larger than the request is split (small pool: when at least
//   512 bytes remain; large pool: when more than 1 MiB remains), and a freed block merges with
//   free neighbours of its segment.
// - Out of memory: wait for the pending events, return every whole free segment to the device,
//   try once more, then throw kiln::OutOfMemory giving the requested, in-use, reserved and free
//   bytes.
// - Private pools, for CUDA graphs (PyTorch's graph pools): while a stream is captured, its
//   blocks come from a pool of their own, keyed like a stream that never runs. A graph replays
//   its kernels on those addresses, so until it is gone nobody else gets the blocks (freed, they
//   go back to the private pool) and the cache never returns their segments to the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/allocator.h"

namespace kiln {

/// A device stream or event, opaque to the allocator (a CUstream or CUevent for CUDA).
using StreamHandle = uintptr_t;
using EventHandle = uintptr_t;

/// One device's raw memory and stream ordering, as the caching allocator uses them.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// `bytes` of device memory, or nullptr when the device has no more.
  virtual void* malloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  /// An event that completes when the work queued on `stream` so far has run.
  virtual EventHandle record_event(StreamHandle stream) = 0;
  virtual bool event_done(EventHandle e) = 0;
  /// Blocks the host until `e` completes.
  virtual void synchronize_event(EventHandle e) = 0;
  virtual void destroy_event(EventHandle e) = 0;
  /// The calling thread's current stream on this device: where an allocation is used first.
  virtual StreamHandle current_stream() = 0;
  /// The device's free and total bytes (for the out-of-memory message).
  virtual void mem_info(size_t* free, size_t* total) = 0;
  /// The device's name in errors ("cuda:0").
  virtual std::string name() const = 0;
};

/// Per-device caching allocator; thread-safe. stats(): in_use is allocated bytes (blocks as
/// handed out, rounded), reserved what the device gave it, cached the difference,
/// system_allocs the device allocations made.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(std::unique_ptr<DeviceMemory> memory);
  ~CachingAllocator() override;

  /// A block for work on the current stream.
  void* allocate(size_t nbytes) override;
  /// A block for work on `stream`.
  void* allocate(size_t nbytes, StreamHandle stream);
  void deallocate(void* p, size_t nbytes) override;
  /// Marks block `p` as used by `stream` too: when it is freed, it is reused only after the
  /// work queued on `stream` until then has run.
  void record_stream(void* p, StreamHandle stream) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  /// Waits for pending events, then returns every whole free segment to the device.
  void empty_cache() override;
  /// Caps the bytes held free; past it, whole free segments go back to the device at once
  /// (0: every segment goes back as soon as it is free, as without a cache).
  void set_cache_limit(int64_t bytes) override;
  /// The stream a live block was allocated for.
  StreamHandle stream_of(void* p) const;

  /// From here until end_private_pool(stream), blocks for work on `stream` come from a new
  /// private pool, whose key is returned (a handle no real stream has).
  StreamHandle begin_private_pool(StreamHandle stream);
  void end_private_pool(StreamHandle stream);
  /// The graph that used pool `key` is gone and its work has run: the pool's blocks become
  /// ordinary blocks of `stream`, free ones back in its pool.
  void release_private_pool(StreamHandle key, StreamHandle stream);

  static constexpr size_t kMinBlock = 512;            // sizes round up to this
  static constexpr size_t kSmallSize = 1 << 20;       // largest request of the small pool
  static constexpr size_t kSmallSegment = 2 << 20;    // the small pool's segments
  static constexpr size_t kMinLargeAlloc = 10 << 20;  // below this, large requests share
  static constexpr size_t kLargeSegment = 20 << 20;   // ... segments of this size
  static constexpr size_t kRoundLarge = 2 << 20;      // larger ones round up to this

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// "512 B", "2.00 MiB", "1.50 GiB": sizes in messages.
std::string format_bytes(int64_t bytes);

}  // namespace kiln
