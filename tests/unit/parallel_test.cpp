// tests/unit/parallel_test.cpp -- parallel_for: coverage, chunking, errors, nesting, several
// callers at once, the caller's thread-local state, idle workers, BLAS's thread count.
#include <cblas.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/recorder.h"
#include "tests/unit/test_util.h"

using namespace kiln;

namespace {

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

// Holds each chunk of one parallel_for call until all `chunks` of them have started, so a test
// sees them run at once on distinct threads without depending on timing. A pool that ran them
// one after another would stall here; the 20 s limit turns that into a failure, not a hang.
struct Rendezvous {
  explicit Rendezvous(int chunks) : chunks(chunks) {}
  void arrive() {
    std::unique_lock<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    if (++started == chunks) all.notify_all();
    else if (!all.wait_for(lock, std::chrono::seconds(20), [&] { return started >= chunks; })) timed_out = true;
  }
  const int chunks;
  std::mutex mu;
  std::condition_variable all;
  int started = 0;
  bool timed_out = false;
  std::set<std::thread::id> threads;
};

double process_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// CPU time the whole process spends over a 200 ms sleep of this thread.
double idle_window_cpu_ms() {
  double t0 = process_cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return process_cpu_ms() - t0;
}

// A tracer stand-in: parallel_for only passes it on, nothing records through it here.
struct NullRecorder : Recorder {
  Tensor record(OpId, std::span<const Tensor>, const Attrs&, const TensorType&) override { return {}; }
  void record_assign(const Tensor&, const Tensor&) override {}
  void alias(const Tensor&, const Tensor&) override {}
  void on_new_storage(const Storage*) override {}
  std::string describe(const TensorImpl*) override { return "null"; }
};

// Restores OpenBLAS's thread count a test changed.
struct BlasCountGuard {
  int saved = openblas_get_num_threads();
  ~BlasCountGuard() { openblas_set_num_threads(saved); }
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
  for (auto [n, grain] : {std::pair<int64_t, int64_t>{10, 4}, {100, 30}, {1000, 1}, {9, 2}, {5, 5}}) {
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

// Every caller's call is split into num_threads() chunks that all run at once: the caller runs
// one, the pool's workers the others, while the other callers' calls run too.
TEST(ParallelFor, ConcurrentCallersEachGetThePoolsWorkers) {
  ThreadCountGuard guard;
  for (auto shape : {std::pair{2, 2}, {2, 4}, {4, 2}, {4, 4}, {3, 3}}) {
    int callers = shape.first, threads = shape.second;  // named: lambdas capture them (clang 14)
    set_num_threads(threads);
    constexpr int kReps = 10;
    constexpr int64_t kN = 1000;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(callers * kReps * kN));
    std::atomic<int> failures{0};
    std::vector<std::thread> pool_users;
    for (int c = 0; c < callers; ++c)
      pool_users.emplace_back([&, c] {
        for (int rep = 0; rep < kReps; ++rep) {
          Rendezvous meet(threads);
          std::atomic<int> chunks{0};
          parallel_for(0, kN, 10, [&](int64_t b, int64_t e) {
            chunks.fetch_add(1);
            meet.arrive();
            for (int64_t i = b; i < e; ++i) hits[(c * kReps + rep) * kN + i].fetch_add(1);
          });
          bool ok = chunks.load() == threads && !meet.timed_out && static_cast<int>(meet.threads.size()) == threads &&
                    meet.threads.count(std::this_thread::get_id()) == 1;  // the caller works too
          failures.fetch_add(!ok);
        }
      });
    for (auto& t : pool_users) t.join();
    EXPECT_EQ(failures.load(), 0) << callers << " callers on " << threads << " threads";
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << callers << " callers, " << threads << " threads";
  }
}

TEST(ParallelFor, ConcurrentCallersRunNestedLoopsInline) {
  ThreadCountGuard guard;
  set_num_threads(3);
  constexpr int kCallers = 3, kOuter = 30, kInner = 40;
  std::vector<std::atomic<int>> hits(kCallers * kOuter * kInner);
  std::atomic<int> failures{0};
  std::vector<std::thread> pool_users;
  for (int c = 0; c < kCallers; ++c)
    pool_users.emplace_back([&, c] {
      parallel_for(0, kOuter, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          std::thread::id me = std::this_thread::get_id();
          int calls = 0;
          parallel_for(0, kInner, 1, [&](int64_t ib, int64_t ie) {
            ++calls;
            failures.fetch_add(std::this_thread::get_id() != me || !in_parallel_region());
            for (int64_t j = ib; j < ie; ++j) hits[(c * kOuter + i) * kInner + j].fetch_add(1);
          });
          failures.fetch_add(calls != 1);
        }
      });
      failures.fetch_add(in_parallel_region());
    });
  for (auto& t : pool_users) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

// Each failing call rethrows its own error, to its own caller, while other callers succeed.
TEST(ParallelFor, ConcurrentCallersGetTheirOwnExceptions) {
  ThreadCountGuard guard;
  set_num_threads(3);
  constexpr int kCallers = 4, kReps = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool_users;
  for (int c = 0; c < kCallers; ++c)
    pool_users.emplace_back([&, c] {
      for (int rep = 0; rep < kReps; ++rep) {
        bool throws = (c + rep) % 2 == 0;
        int64_t bad = (rep * 37) % 300;
        std::string message = fmt::format("caller {} rep {}", c, rep);
        std::atomic<int64_t> sum{0};
        try {
          parallel_for(0, 300, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
              if (throws && i == bad) throw Error(message);
              sum.fetch_add(i);
            }
          });
          failures.fetch_add(throws || sum.load() != 299 * 300 / 2);
        } catch (const Error& err) {
          failures.fetch_add(!throws || std::string(err.what()).find(message) == std::string::npos);
        }
      }
    });
  for (auto& t : pool_users) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::atomic<int64_t> sum{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

// A chunk on a worker sees the caller's grad mode and tracer, and leaves the worker's own as
// they were (the next call, made with grad mode on, sees it on).
TEST(ParallelFor, ChunksSeeTheCallersGradModeAndRecorder) {
  ThreadCountGuard guard;
  set_num_threads(3);
  auto run = [](bool* grad_seen, Recorder** recorder_seen, Rendezvous& meet) {
    std::atomic<int> disagree{0};
    bool first = true;
    std::mutex mu;
    parallel_for(0, 3, 1, [&](int64_t, int64_t) {
      meet.arrive();
      std::lock_guard<std::mutex> lock(mu);
      if (first) {
        *grad_seen = grad_enabled();
        *recorder_seen = active_recorder();
        first = false;
      } else {
        disagree.fetch_add(*grad_seen != grad_enabled() || *recorder_seen != active_recorder());
      }
    });
    EXPECT_EQ(disagree.load(), 0);
    EXPECT_FALSE(meet.timed_out);
    EXPECT_EQ(meet.threads.size(), 3u);  // two of the three chunks ran on workers
  };
  bool grad = true;
  Recorder* recorder = nullptr;
  {
    NoGradGuard no_grad;
    Rendezvous meet(3);
    run(&grad, &recorder, meet);
    EXPECT_FALSE(grad);
    EXPECT_EQ(recorder, nullptr);
  }
  {
    Rendezvous meet(3);
    run(&grad, &recorder, meet);
    EXPECT_TRUE(grad);
  }
  NullRecorder tracer;
  {
    RecorderGuard tracing(&tracer);
    Rendezvous meet(3);
    run(&grad, &recorder, meet);
    EXPECT_EQ(recorder, &tracer);
  }
  Rendezvous meet(3);
  run(&grad, &recorder, meet);
  EXPECT_EQ(recorder, nullptr);
  EXPECT_TRUE(grad_enabled());
}

// Idle workers sleep: after a burst of calls the process uses almost no CPU while it waits.
TEST(ParallelFor, IdleWorkersTakeNoCpu) {
  ThreadCountGuard guard;
  // First wait (up to 4 s) for the process to be quiet: OpenBLAS's own threads spin for a while
  // after the library starts.
  for (int i = 0; i < 20 && idle_window_cpu_ms() >= 20; ++i) {
  }
  set_num_threads(8);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 200; ++rep)
    parallel_for(0, 8000, 1, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += i;
      sum.fetch_add(s);
    });
  EXPECT_EQ(sum.load(), int64_t{200} * (7999 * 8000 / 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_LT(idle_window_cpu_ms(), 20.0);
}

TEST(BlasThreadsScope, SetsOneThreadWhileAnyIsOpenAndRestoresTheCount) {
  BlasCountGuard blas;
  openblas_set_num_threads(2);
  {
    BlasThreadsScope outer;
    EXPECT_EQ(openblas_get_num_threads(), 1);
    {
      BlasThreadsScope inner;
      EXPECT_EQ(openblas_get_num_threads(), 1);
    }
    EXPECT_EQ(openblas_get_num_threads(), 1);
  }
  EXPECT_EQ(openblas_get_num_threads(), 2);
  // Scopes on several threads at once: the count stays 1 until the last one closes.
  std::atomic<int> wrong{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 4; ++t)
    users.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        BlasThreadsScope scope;
        wrong.fetch_add(openblas_get_num_threads() != 1);
      }
    });
  for (auto& t : users) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(openblas_get_num_threads(), 2);
  // A count someone else sets while a scope is open is theirs to keep.
  {
    BlasThreadsScope scope;
    openblas_set_num_threads(3);
  }
  EXPECT_EQ(openblas_get_num_threads(), 3);
}

// kiln's matmul and conv2d leave OpenBLAS's thread count as the program set it, also when
// several threads run them at once.
TEST(BlasThreadsScope, KilnBlasWorkLeavesTheProgramsCount) {
  ThreadCountGuard guard;
  BlasCountGuard blas;
  openblas_set_num_threads(2);
  Tensor a = randn({96, 128}), b = randn({128, 80}), batched = randn({8, 32, 32});
  Tensor x = randn({2, 3, 12, 12}), w = randn({4, 3, 3, 3});
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    Tensor ab = matmul(a, b), bb = matmul(batched, batched), ab64 = matmul(a.to(f64), b.to(f64));
    Tensor y = conv2d(x, w);
    EXPECT_EQ(openblas_get_num_threads(), 2) << threads << " threads";
    EXPECT_TRUE(allclose(ab64.to(f32), ab, 1e-4, 1e-4));
    std::vector<std::thread> users;
    for (int t = 0; t < 3; ++t)
      users.emplace_back([&] {
        for (int i = 0; i < 20; ++i) {
          Tensor p = matmul(a, b), q = conv2d(x, w);
        }
      });
    for (auto& t : users) t.join();
    EXPECT_EQ(openblas_get_num_threads(), 2) << threads << " threads";
  }
}
