// tests/unit/caching_allocator_test.cpp -- the device caching allocator's logic on a fake
// provider: size classes and segments, per-stream reuse, splitting and merging, blocks used on
// other streams held back until their events complete, out-of-memory retry and its error, the
// statistics, empty_cache and a cache limit, and the private pools of CUDA graphs.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "runtime/caching_allocator.h"
#include "runtime/error.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

constexpr size_t MiB = 1 << 20;

// A device with `budget` bytes. Addresses are numbers, never touched; an event completes when
// the test says so (done()).
struct FakeDevice {
  size_t budget = 64 * MiB, used = 0;
  uintptr_t next_address = 1 << 20;
  std::map<void*, size_t> segments;
  int mallocs = 0, frees = 0;
  std::map<EventHandle, StreamHandle> events;  // live events -> their stream
  std::set<EventHandle> completed;
  EventHandle next_event = 1;
  StreamHandle current = 1;

  void complete_all() {
    for (auto& [e, s] : events) completed.insert(e);
  }
};

class FakeMemory final : public DeviceMemory {
 public:
  explicit FakeMemory(FakeDevice& d) : d_(d) {}
  void* malloc(size_t bytes) override {
    if (d_.used + bytes > d_.budget) return nullptr;
    void* p = reinterpret_cast<void*>(d_.next_address);
    d_.next_address += bytes + 4096;  // gaps: adjacent segments never look contiguous
    d_.used += bytes;
    d_.segments[p] = bytes;
    ++d_.mallocs;
    return p;
  }
  void free(void* p) override {
    auto it = d_.segments.find(p);
    ASSERT_NE(it, d_.segments.end()) << "freed an address that is no segment";
    d_.used -= it->second;
    d_.segments.erase(it);
    ++d_.frees;
  }
  EventHandle record_event(StreamHandle stream) override {
    EventHandle e = d_.next_event++;
    d_.events[e] = stream;
    return e;
  }
  bool event_done(EventHandle e) override { return d_.completed.count(e) > 0; }
  void synchronize_event(EventHandle e) override { d_.completed.insert(e); }
  void destroy_event(EventHandle e) override { d_.events.erase(e); }
  StreamHandle current_stream() override { return d_.current; }
  void mem_info(size_t* free, size_t* total) override {
    *free = d_.budget - d_.used;
    *total = d_.budget;
  }
  std::string name() const override { return "fake:0"; }

 private:
  FakeDevice& d_;
};

struct Fixture {
  FakeDevice device;
  CachingAllocator a{std::make_unique<FakeMemory>(device)};
};

TEST(CachingAllocator, SmallRequestsShareTwoMegabyteSegments) {
  Fixture f;
  void* p = f.a.allocate(1);
  EXPECT_EQ(f.device.mallocs, 1);
  EXPECT_EQ(f.device.segments.begin()->second, CachingAllocator::kSmallSegment);
  std::vector<void*> more;
  for (int i = 0; i < 4095; ++i) more.push_back(f.a.allocate(512));  // 4096 blocks of 512 B fill it
  EXPECT_EQ(f.device.mallocs, 1);
  void* q = f.a.allocate(100);
  EXPECT_EQ(f.device.mallocs, 2) << "the first segment is full";
  AllocatorStats s = f.a.stats();
  EXPECT_EQ(s.in_use, int64_t(4097 * 512));
  EXPECT_EQ(s.reserved, int64_t(2 * CachingAllocator::kSmallSegment));
  EXPECT_EQ(s.system_allocs, 2);
  f.a.deallocate(p, 1);
  f.a.deallocate(q, 100);
  for (void* m : more) f.a.deallocate(m, 512);
  EXPECT_EQ(f.a.stats().in_use, 0);
}

TEST(CachingAllocator, LargeRequestsGetTwentyMegabyteOrTheirOwnRoundedSegments) {
  Fixture f;
  void* b = f.a.allocate(12 * MiB + 5);  // 10 MiB and up: a segment of its own, rounded to 2 MiB
  EXPECT_EQ(f.device.segments[b], 14 * MiB);
  void* a = f.a.allocate(3 * MiB);  // below 10 MiB: a shared 20 MiB segment
  EXPECT_EQ(f.device.mallocs, 2);
  EXPECT_EQ(f.device.segments[a], CachingAllocator::kLargeSegment);
  void* c = f.a.allocate(5 * MiB);  // from the rest of a's segment
  EXPECT_EQ(f.device.mallocs, 2);
  EXPECT_EQ(static_cast<char*>(c), static_cast<char*>(a) + 3 * MiB);
  f.a.deallocate(a, 0);
  f.a.deallocate(b, 0);
  f.a.deallocate(c, 0);
}

TEST(CachingAllocator, AFreedBlockIsReusedOnItsOwnStreamOnly) {
  Fixture f;
  void* p = f.a.allocate(4096, 1);
  f.a.deallocate(p, 4096);
  EXPECT_EQ(f.a.allocate(4096, 1), p) << "same stream, same size: the cached block";
  void* q = f.a.allocate(4096, 2);
  EXPECT_NE(q, p);
  EXPECT_EQ(f.device.mallocs, 2) << "another stream never takes a stream's cached block";
  EXPECT_EQ(f.a.stream_of(q), StreamHandle(2));
  EXPECT_EQ(f.a.stats().cache_hits, 1);
}

TEST(CachingAllocator, SplitBlocksMergeBackWhenFreed) {
  Fixture f;
  void* a = f.a.allocate(4 * MiB);
  void* b = f.a.allocate(4 * MiB);
  void* c = f.a.allocate(4 * MiB);
  EXPECT_EQ(f.device.mallocs, 1);  // three pieces of one 20 MiB segment
  f.a.deallocate(b, 0);
  f.a.deallocate(a, 0);
  f.a.deallocate(c, 0);
  // Merged back whole: 20 MiB fits again without a device allocation, at the segment's start.
  void* whole = f.a.allocate(CachingAllocator::kLargeSegment - 512);
  EXPECT_EQ(whole, a);
  EXPECT_EQ(f.device.mallocs, 1);
  f.a.deallocate(whole, 0);
  f.a.empty_cache();
  EXPECT_EQ(f.device.frees, 1);
  EXPECT_EQ(f.a.stats().reserved, 0);
}

TEST(CachingAllocator, ALargeBlockIsSplitOnlyWhenMoreThanAMegabyteRemains) {
  Fixture f;
  void* a = f.a.allocate(19 * MiB + 512);  // 20 MiB segment, less than 1 MiB left: not split
  EXPECT_EQ(f.a.stats().in_use, int64_t(20 * MiB));
  f.a.deallocate(a, 0);
  void* b = f.a.allocate(2 * MiB);  // takes the whole free block: nothing else there
  EXPECT_EQ(b, a);
  void* c = f.a.allocate(2 * MiB);  // the rest of it, split off when b was taken
  EXPECT_EQ(static_cast<char*>(c), static_cast<char*>(a) + 2 * MiB);
  EXPECT_EQ(f.device.mallocs, 1);
  f.a.deallocate(b, 0);
  f.a.deallocate(c, 0);
}

TEST(CachingAllocator, ABlockUsedOnAnotherStreamWaitsForItsEvent) {
  Fixture f;
  void* p = f.a.allocate(8192, 1);
  f.a.record_stream(p, 2);
  f.a.deallocate(p, 8192);
  ASSERT_EQ(f.device.events.size(), 1u) << "an event recorded on the other stream at free time";
  EXPECT_EQ(f.device.events.begin()->second, StreamHandle(2));
  void* q = f.a.allocate(8192, 1);
  EXPECT_NE(q, p) << "reused before stream 2's work on it was done";
  f.device.complete_all();
  void* r = f.a.allocate(8192, 1);
  EXPECT_EQ(r, p) << "once the event completed, the block is free again";
  EXPECT_TRUE(f.device.events.empty()) << "the event is destroyed after use";
  f.a.deallocate(q, 0);
  f.a.deallocate(r, 0);
}

TEST(CachingAllocator, RecordStreamOfItsOwnStreamChangesNothing) {
  Fixture f;
  void* p = f.a.allocate(8192, 1);
  f.a.record_stream(p, 1);
  f.a.deallocate(p, 0);
  EXPECT_TRUE(f.device.events.empty());
  EXPECT_EQ(f.a.allocate(8192, 1), p);
}

TEST(CachingAllocator, OutOfMemoryFreesTheCacheAndRetriesOnce) {
  Fixture f;
  f.device.budget = 44 * MiB;
  void* a = f.a.allocate(20 * MiB, 1);  // own segment each
  void* b = f.a.allocate(20 * MiB, 2);
  f.a.deallocate(a, 0);
  f.a.deallocate(b, 0);
  EXPECT_EQ(f.a.stats().cached, int64_t(40 * MiB));
  // Stream 3 has no cached block and the device has 4 MiB left: the cache goes back first.
  void* c = f.a.allocate(30 * MiB, 3);
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(f.device.frees, 2);
  EXPECT_EQ(f.a.stats().reserved, int64_t(30 * MiB));
  // More than the device has even with an empty cache: a clear error.
  test::expect_error([&] { f.a.allocate(20 * MiB, 3); },
                     {"fake:0: out of memory: cannot allocate 20.00 MiB", "30.00 MiB in use", "30.00 MiB reserved",
                      "14.00 MiB free of 44.00 MiB", "tried again"});
  EXPECT_THROW(f.a.allocate(20 * MiB, 3), OutOfMemory);
  EXPECT_EQ(f.a.stats().in_use, int64_t(30 * MiB)) << "a failed allocation leaves the accounts as they were";
  f.a.deallocate(c, 0);
}

TEST(CachingAllocator, OutOfMemoryWaitsForPendingBlocksBeforeGivingUp) {
  Fixture f;
  f.device.budget = 40 * MiB;
  void* a = f.a.allocate(30 * MiB, 1);
  f.a.record_stream(a, 2);
  f.a.deallocate(a, 0);                 // pending on stream 2's event, which nobody completes
  void* b = f.a.allocate(30 * MiB, 3);  // the retry synchronizes the event, frees the segment
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(f.device.frees, 1);
  f.a.deallocate(b, 0);
}

TEST(CachingAllocator, StatisticsCountPeakAndDeviceAllocations) {
  Fixture f;
  void* a = f.a.allocate(3000);  // 3072 after rounding
  void* b = f.a.allocate(5 * MiB);
  f.a.deallocate(a, 0);
  AllocatorStats s = f.a.stats();
  EXPECT_EQ(s.in_use, int64_t(5 * MiB));
  EXPECT_EQ(s.peak_in_use, int64_t(5 * MiB + 3072));
  EXPECT_EQ(s.reserved, int64_t(CachingAllocator::kSmallSegment + CachingAllocator::kLargeSegment));
  EXPECT_EQ(s.cached, s.reserved - s.in_use);
  EXPECT_EQ(s.system_allocs, 2);
  EXPECT_EQ(s.allocations, 2);
  f.a.reset_peak();
  EXPECT_EQ(f.a.stats().peak_in_use, int64_t(5 * MiB));
  // empty_cache returns the small segment (whole and free) but not the large one, in use.
  f.a.empty_cache();
  EXPECT_EQ(f.a.stats().reserved, int64_t(CachingAllocator::kLargeSegment));
  EXPECT_EQ(f.device.frees, 1);
  f.a.deallocate(b, 0);
}

TEST(CachingAllocator, ACacheLimitOfZeroReturnsEverySegmentAtOnce) {
  Fixture f;
  f.a.set_cache_limit(0);
  for (int i = 0; i < 3; ++i) f.a.deallocate(f.a.allocate(1 * MiB), 0);
  EXPECT_EQ(f.device.mallocs, 3);
  EXPECT_EQ(f.device.frees, 3);
  EXPECT_EQ(f.a.stats().reserved, 0);
  EXPECT_EQ(f.a.stats().cache_limit, 0);
}

TEST(CachingAllocator, APrivatePoolKeepsItsBlocksFromEveryoneElse) {
  Fixture f;
  StreamHandle key = f.a.begin_private_pool(1);
  EXPECT_NE(key, StreamHandle(1));
  void* p = f.a.allocate(4096, 1);
  EXPECT_EQ(f.a.stream_of(p), key) << "work on the captured stream allocates from the private pool";
  f.a.deallocate(p, 4096);
  EXPECT_EQ(f.a.allocate(4096, 1), p) << "within the capture, a freed block is reused";
  f.a.deallocate(p, 4096);
  f.a.end_private_pool(1);
  void* q = f.a.allocate(4096, 1);
  EXPECT_NE(q, p) << "after the capture, the graph's blocks are not handed out";
  f.a.deallocate(q, 4096);
  f.a.empty_cache();
  EXPECT_EQ(f.device.segments.size(), 1u) << "the cache never returns a graph's segment";
  f.a.release_private_pool(key, 1);
  EXPECT_EQ(f.a.allocate(4096, 1), p) << "released, its blocks are the stream's own";
  f.a.deallocate(p, 4096);
  f.a.empty_cache();
  EXPECT_TRUE(f.device.segments.empty());
}

TEST(CachingAllocator, AReleasedPoolsLiveBlockReturnsToTheStream) {
  Fixture f;
  StreamHandle key = f.a.begin_private_pool(1);
  void* kept = f.a.allocate(1 * MiB, 1);
  f.a.end_private_pool(1);
  f.a.release_private_pool(key, 1);
  EXPECT_EQ(f.a.stream_of(kept), StreamHandle(1));
  f.a.deallocate(kept, 0);
  EXPECT_EQ(f.a.allocate(1 * MiB, 1), kept);
  f.a.deallocate(kept, 0);
}

TEST(CachingAllocator, FormatsSizesForMessages) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 << 10), "3.00 KiB");
  EXPECT_EQ(format_bytes(int64_t(5) << 20), "5.00 MiB");
  EXPECT_EQ(format_bytes(int64_t(3) << 29), "1.50 GiB");
}

}  // namespace
}  // namespace kiln
