// tests/unit/allocator_test.cpp -- the caching CPU allocator: size classes, reuse, statistics.
#include <gtest/gtest.h>

#include <cstdint>
#include <new>
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
  EXPECT_THROW(a.allocate(size_t{1} << 62), std::bad_alloc);
  EXPECT_THROW(a.allocate(SIZE_MAX), std::bad_alloc);
  EXPECT_THROW(a.allocate(SIZE_MAX / 2 + 2), std::bad_alloc);
  EXPECT_EQ(a.stats().in_use, in_use);
}
