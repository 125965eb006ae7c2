// tests/unit/parallel_test.cpp -- parallel_for: coverage, chunking, errors, nesting, threads.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;

namespace {

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

}  // namespace

TEST(ParallelFor, CoversEveryIndexExactlyOnce) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 8}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 10007}) {
      for (int64_t grain : {1, 3, 64, 5000, 100000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n) + 10);
        parallel_for(5, 5 + n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(5, b);
          ASSERT_LT(b, e);
          ASSERT_LE(e, 5 + n);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n + 10; ++i)
          ASSERT_EQ(hits[i].load(), i >= 5 && i < 5 + n ? 1 : 0) << "n=" << n << " grain=" << grain;
      }
    }
  }
}

TEST(ParallelFor, UsesAtMostOneChunkPerThreadOfAtLeastGrainItems) {
  ThreadCountGuard guard;
  set_num_threads(4);
  EXPECT_EQ(num_threads(), 4);
  for (auto [n, grain] :
       {std::pair<int64_t, int64_t>{10, 4}, {100, 30}, {1000, 1}, {9, 2}, {5, 5}}) {
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(b, e);
    });
    EXPECT_LE(chunks.size(), 4u);
    int64_t total = 0;
    for (auto [b, e] : chunks) {
      EXPECT_GE(e - b, std::min(grain, n)) << "n=" << n << " grain=" << grain;
      total += e - b;
    }
    EXPECT_EQ(total, n);
  }
}

TEST(ParallelFor, RethrowsAnExceptionFromAChunk) {
  ThreadCountGuard guard;
  set_num_threads(4);
  std::atomic<int64_t> done{0};
  EXPECT_THROW(parallel_for(0, 4000, 1,
                            [&](int64_t b, int64_t e) {
                              for (int64_t i = b; i < e; ++i) {
                                if (i == 3777) throw std::runtime_error("chunk failed");
                                done.fetch_add(1);
                              }
                            }),
               std::runtime_error);
  EXPECT_LT(done.load(), 4000);
  // The error keeps its type, and the pool still works afterwards.
  test::expect_error(
      [] {
        parallel_for(0, 100, 1, [](int64_t b, int64_t) {
          if (b == 0) throw Error("kiln error from chunk 0");
        });
      },
      {"chunk 0"});
  std::atomic<int64_t> sum{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

TEST(ParallelFor, NestedLoopsRunSeriallyInsideAChunk) {
  ThreadCountGuard guard;
  set_num_threads(3);
  std::vector<std::atomic<int>> hits(50 * 40);
  std::atomic<int> inner_regions{0};
  EXPECT_FALSE(in_parallel_region());
  parallel_for(0, 50, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(in_parallel_region());
    for (int64_t i = b; i < e; ++i) {
      std::thread::id me = std::this_thread::get_id();
      parallel_for(0, 40, 1, [&](int64_t ib, int64_t ie) {
        EXPECT_EQ(std::this_thread::get_id(), me);  // inline on the same thread
        inner_regions.fetch_add(1);
        for (int64_t j = ib; j < ie; ++j) hits[i * 40 + j].fetch_add(1);
      });
    }
  });
  EXPECT_FALSE(in_parallel_region());
  EXPECT_EQ(inner_regions.load(), 50);  // one inline call each
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ParallelFor, RunsFromSeveralThreadsAtOnce) {
  ThreadCountGuard guard;
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(4 * 20000);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 20; ++rep)
        parallel_for(0, 1000, 10, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[c * 20000 + rep * 1000 + i].fetch_add(1);
        });
    });
  for (auto& t : callers) t.join();
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ParallelFor, SetNumThreadsChangesTheCount) {
  ThreadCountGuard guard;
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  set_num_threads(0);  // clamps to one
  EXPECT_EQ(num_threads(), 1);
  std::atomic<int> calls{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000);
    calls.fetch_add(1);
  });
  EXPECT_EQ(calls.load(), 1);
  set_num_threads(6);
  EXPECT_EQ(num_threads(), 6);
  std::atomic<int> chunks{0};
  parallel_for(0, 60, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(e - b, 10);
    chunks.fetch_add(1);
  });
  EXPECT_EQ(chunks.load(), 6);
}
