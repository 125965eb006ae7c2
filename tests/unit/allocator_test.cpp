// tests/unit/allocator_test.cpp -- the caching CPU allocator: size classes, reuse, statistics.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;

TEST(Allocator, ReusesAFreedBlockOfTheSameSize) {
  Allocator& a = cpu_allocator();
  a.empty_cache();
  AllocatorStats s0 = a.stats();
  EXPECT_EQ(s0.cached, 0);
  void* p = a.allocate(100000);
  AllocatorStats s1 = a.stats();
  EXPECT_EQ(s1.allocations, s0.allocations + 1);
  EXPECT_EQ(s1.system_allocs, s0.system_allocs + 1);
  EXPECT_EQ(s1.cache_hits, s0.cache_hits);
  a.deallocate(p, 100000);
  AllocatorStats s2 = a.stats();
  EXPECT_EQ(s2.in_use, s0.in_use);
  EXPECT_GE(s2.cached, 100000);
  void* q = a.allocate(100000);
  AllocatorStats s3 = a.stats();
  EXPECT_EQ(q, p);
  EXPECT_EQ(s3.cache_hits, s2.cache_hits + 1);
  EXPECT_EQ(s3.system_allocs, s2.system_allocs);
  EXPECT_EQ(s3.cached, s2.cached - (s3.in_use - s2.in_use));
  a.deallocate(q, 100000);
}

TEST(Allocator, EmptyCacheDropsEveryCachedByte) {
  Allocator& a = cpu_allocator();
  std::vector<void*> blocks;
  for (size_t n : {1000, 5000, 70000, 1 << 20}) blocks.push_back(a.allocate(n));
  size_t i = 0;
  for (size_t n : {1000, 5000, 70000, 1 << 20}) a.deallocate(blocks[i++], n);
  EXPECT_GT(a.stats().cached, 1 << 20);
  a.empty_cache();
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.cached, 0);
  void* p = a.allocate(5000);  // nothing left to reuse
  EXPECT_EQ(a.stats().system_allocs, s.system_allocs + 1);
  a.deallocate(p, 5000);
}

TEST(Allocator, BlocksAreAlignedAndWasteAtMostAQuarter) {
  Allocator& a = cpu_allocator();
  a.empty_cache();
  for (size_t n = 1; n < (size_t{1} << 22); n = n * 5 / 4 + 1) {
    int64_t before = a.stats().in_use;
    void* p = a.allocate(n);
    int64_t block = a.stats().in_use - before;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    EXPECT_GE(block, static_cast<int64_t>(n)) << n;
    EXPECT_LE(block, std::max<int64_t>(64, static_cast<int64_t>(n) * 5 / 4 + 1)) << n;
    static_cast<char*>(p)[n - 1] = 1;  // the whole request is usable
    a.deallocate(p, n);
    EXPECT_EQ(a.stats().in_use, before);
  }
  a.empty_cache();
}

TEST(Allocator, TracksPeakUsage) {
  Allocator& a = cpu_allocator();
  int64_t base = a.stats().in_use;
  void* p = a.allocate(1 << 20);
  void* q = a.allocate(1 << 20);
  EXPECT_GE(a.stats().peak_in_use, base + (2 << 20));
  a.deallocate(p, 1 << 20);
  a.deallocate(q, 1 << 20);
  EXPECT_EQ(a.stats().in_use, base);
  EXPECT_GE(a.stats().peak_in_use, base + (2 << 20));
}

TEST(Allocator, TensorsOfOneSizeReuseMemory) {
  Allocator& a = cpu_allocator();
  { Tensor warm = empty({256, 256}); }
  AllocatorStats s0 = a.stats();
  for (int i = 0; i < 10; ++i) {
    Tensor t = empty({256, 256});
  }
  AllocatorStats s1 = a.stats();
  EXPECT_EQ(s1.allocations - s0.allocations, 10);
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 10);
  EXPECT_EQ(s1.system_allocs, s0.system_allocs);
}

TEST(Allocator, RefusesImpossibleSizes) {
  Allocator& a = cpu_allocator();
  int64_t in_use = a.stats().in_use;
  EXPECT_THROW(a.allocate(size_t{1} << 62), OutOfMemory);
  EXPECT_THROW(a.allocate(SIZE_MAX), OutOfMemory);
  EXPECT_THROW(a.allocate(SIZE_MAX / 2 + 2), OutOfMemory);
  EXPECT_EQ(a.stats().in_use, in_use);
}

namespace kiln {
namespace {

// Out of memory, injected through the allocator's system-memory interface: the allocator
// returns its cached blocks, asks once more, and only then gives up with a kiln::OutOfMemory that
// names the op and the bytes. The process goes on.
std::atomic<int> g_calls{0};
std::atomic<size_t> g_fail_from{~size_t{0}};
std::atomic<int> g_fail_first{0};
void* failing_get(size_t align, size_t bytes) {
  ++g_calls;
  if (bytes >= g_fail_from.load()) return nullptr;
  if (g_fail_first.load() > 0 && g_fail_first.fetch_sub(1) > 0) return nullptr;
  return std::aligned_alloc(align, bytes);
}
void plain_put(void* p) { std::free(p); }

struct InjectFailures {
  SystemMemory saved = set_cpu_system_memory({failing_get, plain_put});
  ~InjectFailures() {
    set_cpu_system_memory(saved);
    g_fail_from = ~size_t{0};
    g_fail_first = 0;
  }
};

TEST(Allocator, OutOfMemoryIsAnErrorNamingTheOpAndTheBytes) {
  Tensor a = ones({1 << 22}), b = ones({1 << 22});  // 16 MiB each, allocated before the failures
  InjectFailures inject;
  g_fail_from = size_t{1} << 24;
  g_calls = 0;
  try {
    Tensor c = a + b;
    ADD_FAILURE() << "expected kiln::OutOfMemory";
  } catch (const OutOfMemory& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("add"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[4194304]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("16777216 bytes"), std::string::npos) << msg;
  }
  EXPECT_EQ(g_calls.load(), 2) << "asked once, then once more after emptying the cache";
  g_fail_from = ~size_t{0};
  EXPECT_EQ((a + b).sum().item<double>(), 2.0 * (1 << 22));  // and the process goes on
}

TEST(Allocator, AFailedRequestEmptiesTheCacheAndRetriesOnce) {
  { Tensor keep = ones({1 << 16}); }  // a freed block now sits in the cache
  ASSERT_GT(cpu_allocator().stats().cached, 0);
  InjectFailures inject;
  g_fail_first = 1;
  Tensor t = ones({1 << 20});  // a size class the cache does not hold: goes to the system
  EXPECT_EQ(cpu_allocator().stats().cached, 0) << "the cache was not emptied before the retry";
  EXPECT_EQ(g_fail_first.load(), 0) << "the injected failure was not reached";
  EXPECT_EQ(t.sum().item<double>(), double(1 << 20));
}

}  // namespace
}  // namespace kiln
