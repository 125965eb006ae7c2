// runtime/caching_allocator.cpp -- blocks, pools, splitting, merging and events (the design is
// in the header).
#include "runtime/caching_allocator.h"

#include <fmt/format.h>

#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "runtime/check.h"
#include "runtime/profiler.h"

namespace kiln {

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double b = static_cast<double>(bytes);
  if (bytes < (int64_t{1} << 20)) return fmt::format("{:.2f} KiB", b / 1024);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.2f} MiB", b / (1 << 20));
  if (bytes < (int64_t{1} << 40)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  return fmt::format("{:.2f} TiB", b / static_cast<double>(int64_t{1} << 40));
}

namespace {

// A piece of a segment (one device allocation). Free blocks sit in their pool; a segment's
// blocks are linked in address order so that free neighbours merge.
struct Block {
  StreamHandle stream = 0;
  size_t size = 0;
  char* ptr = nullptr;
  bool small = false;  // which pool
  bool allocated = false;
  int pending_events = 0;  // events that must complete before it is free again
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<StreamHandle> stream_uses;  // other streams that used it (record_stream)
};

// Pools order blocks by stream, then size, then address: best fit is a lower_bound.
struct ByStreamSize {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
  }
};
using Pool = std::set<Block*, ByStreamSize>;

size_t round_size(size_t n) {
  return n < CachingAllocator::kMinBlock
             ? CachingAllocator::kMinBlock
             : (n + CachingAllocator::kMinBlock - 1) / CachingAllocator::kMinBlock * CachingAllocator::kMinBlock;
}

size_t segment_size(size_t size) {
  if (size <= CachingAllocator::kSmallSize) return CachingAllocator::kSmallSegment;
  if (size < CachingAllocator::kMinLargeAlloc) return CachingAllocator::kLargeSegment;
  return (size + CachingAllocator::kRoundLarge - 1) / CachingAllocator::kRoundLarge * CachingAllocator::kRoundLarge;
}

bool should_split(const Block* b, size_t size) {
  size_t rest = b->size - size;
  return b->small ? rest >= CachingAllocator::kMinBlock : rest > CachingAllocator::kSmallSize;
}

}  // namespace

struct CachingAllocator::State {
  std::unique_ptr<DeviceMemory> memory;
  mutable std::mutex mu;
  Pool small, large;
  std::unordered_map<void*, Block*> live;              // allocated blocks by address
  std::deque<std::pair<EventHandle, Block*>> pending;  // frees waiting for other streams
  AllocatorStats stats;
  int64_t cap = -1;                                // most bytes held free; -1: no cap
  std::map<StreamHandle, StreamHandle> capturing;  // stream -> its private pool's key
  std::set<StreamHandle> private_pools;            // keys of the pools graphs still use
  StreamHandle next_pool = 1;
  std::string track;  // the profiler's counter track: "cuda:0 memory"

  // The profiler's memory track of the device (one relaxed load when it is off).
  void sample() {
    if (!profiler::enabled()) return;
    if (track.empty()) track = memory->name() + " memory";
    profiler::counter(track, {{"allocated", stats.in_use}, {"reserved", stats.reserved}});
  }

  // The pool key of work on `stream`: its own, or its private pool's while captured.
  StreamHandle key_of(StreamHandle stream) const {
    if (capturing.empty()) return stream;
    auto it = capturing.find(stream);
    return it == capturing.end() ? stream : it->second;
  }

  Pool& pool_of(const Block* b) { return b->small ? small : large; }

  // Returns the blocks whose events are done to their pools.
  void process_events() {
    for (auto it = pending.begin(); it != pending.end();) {
      if (!memory->event_done(it->first)) {
        ++it;
        continue;
      }
      memory->destroy_event(it->first);
      Block* b = it->second;
      it = pending.erase(it);
      if (--b->pending_events == 0) release(b);
    }
  }

  // A block nobody uses any more: merged with free neighbours, back into its pool.
  void release(Block* b) {
    for (Block* n : {b->prev, b->next}) {
      if (!n || n->allocated || n->pending_events > 0) continue;
      pool_of(n).erase(n);
      if (n == b->prev) {
        b->ptr = n->ptr;
        b->prev = n->prev;
        if (b->prev) b->prev->next = b;
      } else {
        b->next = n->next;
        if (b->next) b->next->prev = b;
      }
      b->size += n->size;
      delete n;
    }
    pool_of(b).insert(b);
    stats.cached = stats.reserved - stats.in_use;
    if (cap >= 0 && stats.cached > cap) free_whole_segments();
  }

  // Gives every free block that is a whole segment back to the device.
  void free_whole_segments() {
    for (Pool* pool : {&small, &large}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next || private_pools.count(b->stream)) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        memory->free(b->ptr);
        stats.reserved -= static_cast<int64_t>(b->size);
        delete b;
      }
    }
    stats.cached = stats.reserved - stats.in_use;
  }

  // Waits for every pending event, then frees the whole free segments.
  void release_cache() {
    for (auto& [e, b] : pending) memory->synchronize_event(e);
    process_events();
    free_whole_segments();
  }

  Block* find_free(size_t size, StreamHandle stream, bool small_pool) {
    Pool& pool = small_pool ? small : large;
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  Block* new_segment(size_t size, StreamHandle stream, bool small_pool, size_t requested) {
    size_t bytes = segment_size(size);
    void* p = memory->malloc(bytes);
    if (!p) {  // give back what is cached and try once more
      release_cache();
      p = memory->malloc(bytes);
    }
    if (!p) {
      size_t free = 0, total = 0;
      memory->mem_info(&free, &total);
      throw OutOfMemory(fmt::format(
          "{}: out of memory: cannot allocate {} ({} requested; kiln has {} in use and "
          "{} reserved; the device has {} free of {}); the allocator returned its cached "
          "blocks and tried again",
          memory->name(), format_bytes(static_cast<int64_t>(bytes)), format_bytes(static_cast<int64_t>(requested)),
          format_bytes(stats.in_use), format_bytes(stats.reserved), format_bytes(static_cast<int64_t>(free)),
          format_bytes(static_cast<int64_t>(total))));
    }
    ++stats.system_allocs;
    stats.reserved += static_cast<int64_t>(bytes);
    auto* b = new Block;
    b->stream = stream;
    b->size = bytes;
    b->ptr = static_cast<char*>(p);
    b->small = small_pool;
    return b;
  }
};

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemory> memory) : s_(std::make_unique<State>()) {
  s_->memory = std::move(memory);
}

CachingAllocator::~CachingAllocator() {
  // The device allocators are never destroyed (tensors outlive statics); one made by a test is
  // destroyed with its blocks returned. Segments still in use stay with the device; only the
  // bookkeeping goes.
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->release_cache();
  std::set<Block*> rest;
  for (Pool* pool : {&s_->small, &s_->large}) rest.insert(pool->begin(), pool->end());
  for (auto& [p, b] : s_->live) rest.insert(b);
  for (auto& [e, b] : s_->pending) rest.insert(b);
  for (Block* b : rest) delete b;
}

void* CachingAllocator::allocate(size_t nbytes) { return allocate(nbytes, s_->memory->current_stream()); }

void* CachingAllocator::allocate(size_t nbytes, StreamHandle stream) {
  size_t size = round_size(nbytes);
  bool small_pool = size <= kSmallSize;
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  stream = s.key_of(stream);
  s.process_events();
  ++s.stats.allocations;
  Block* b = s.find_free(size, stream, small_pool);
  if (b) {
    ++s.stats.cache_hits;
  } else {
    b = s.new_segment(size, stream, small_pool, nbytes);
  }
  if (should_split(b, size)) {  // the rest stays free in the pool
    auto* rest = new Block;
    rest->stream = stream;
    rest->size = b->size - size;
    rest->ptr = b->ptr + size;
    rest->small = small_pool;
    rest->prev = b;
    rest->next = b->next;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = size;
    s.pool_of(rest).insert(rest);
  }
  b->allocated = true;
  s.live[b->ptr] = b;
  s.stats.in_use += static_cast<int64_t>(b->size);
  s.stats.peak_in_use = std::max(s.stats.peak_in_use, s.stats.in_use);
  s.stats.cached = s.stats.reserved - s.stats.in_use;
  s.sample();
  return b->ptr;
}

void CachingAllocator::deallocate(void* p, size_t) {
  if (!p) return;
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.live.find(p);
  KILN_ASSERT(it != s.live.end());
  Block* b = it->second;
  s.live.erase(it);
  b->allocated = false;
  s.stats.in_use -= static_cast<int64_t>(b->size);
  s.sample();
  if (b->stream_uses.empty()) {
    s.release(b);
    return;
  }
  for (StreamHandle other : b->stream_uses) {
    s.pending.emplace_back(s.memory->record_event(other), b);
    ++b->pending_events;
  }
  b->stream_uses.clear();
  s.stats.cached = s.stats.reserved - s.stats.in_use;
}

void CachingAllocator::record_stream(void* p, uintptr_t stream) {
  std::lock_guard<std::mutex> lock(s_->mu);
  auto it = s_->live.find(p);
  KILN_CHECK(it != s_->live.end(), "record_stream: the tensor's memory was not allocated by {}'s allocator",
             s_->memory->name());
  Block* b = it->second;
  stream = s_->key_of(stream);
  if (stream == b->stream) return;
  for (StreamHandle u : b->stream_uses)
    if (u == stream) return;
  b->stream_uses.push_back(stream);
}

StreamHandle CachingAllocator::stream_of(void* p) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  auto it = s_->live.find(p);
  KILN_ASSERT(it != s_->live.end());
  return it->second->stream;
}

StreamHandle CachingAllocator::begin_private_pool(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(s_->mu);
  KILN_ASSERT(!s_->capturing.count(stream));
  // Odd numbers with the top bit set: no stream handle (an aligned pointer, or 0) is one.
  StreamHandle key = (StreamHandle{1} << (8 * sizeof(StreamHandle) - 1)) | (s_->next_pool++ << 1) | 1;
  s_->capturing[stream] = key;
  s_->private_pools.insert(key);
  return key;
}

void CachingAllocator::end_private_pool(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->capturing.erase(stream);
}

void CachingAllocator::release_private_pool(StreamHandle key, StreamHandle stream) {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  KILN_ASSERT(s.private_pools.count(key));
  s.private_pools.erase(key);
  for (auto it = s.capturing.begin(); it != s.capturing.end();)
    it = it->second == key ? s.capturing.erase(it) : std::next(it);
  for (auto& [p, b] : s.live)
    if (b->stream == key) b->stream = stream;
  for (auto& [e, b] : s.pending)
    if (b->stream == key) b->stream = stream;
  for (Pool* pool : {&s.small, &s.large}) {
    std::vector<Block*> moved;
    for (auto it = pool->begin(); it != pool->end();) {
      if ((*it)->stream == key) {
        moved.push_back(*it);
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
    for (Block* b : moved) {
      b->stream = stream;
      pool->insert(b);
    }
  }
  if (s.cap >= 0 && s.stats.cached > s.cap) s.free_whole_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  AllocatorStats st = s_->stats;
  st.cache_limit = s_->cap;
  return st;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->stats.peak_in_use = s_->stats.in_use;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->release_cache();
}

void CachingAllocator::set_cache_limit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->cap = bytes;
  if (s_->stats.cached > bytes) s_->free_whole_segments();
}

}  // namespace kiln
