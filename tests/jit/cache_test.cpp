// tests/jit/cache_test.cpp -- jit::Function's plan cache: signatures, counts, LRU eviction,
// grad mode, and concurrent calls.
#include <atomic>
#include <thread>

#include "jit_test_util.h"

namespace kiln {
namespace {

using test::expect_same;

void expect_stats(const jit::Function& f, int64_t traces, int64_t hits) {
  jit::Stats s = f.stats();
  EXPECT_EQ(s.traces, traces);
  EXPECT_EQ(s.hits, hits);
  EXPECT_EQ(s.misses, traces);
}

jit::Function square_plus_one(const Tensor& example) {
  return jit::trace([](Tensor x) { return x * x + 1; }, {example});
}

TEST(Cache, CountsTracesHitsAndMisses) {
  Tensor x = randn({3});
  jit::Function f = square_plus_one(x);
  expect_stats(f, 1, 0);
  f(x);
  f(randn({3}));
  expect_stats(f, 1, 2);
}

TEST(Cache, NewShapeRetracesAndOldShapeStillHits) {
  jit::Function f = square_plus_one(randn({3}));
  Tensor big = randn({2, 5});
  expect_same(f(big), big * big + 1);
  expect_stats(f, 2, 0);
  EXPECT_EQ(f.graph().type(f.graph().inputs[0]).str(), "f32[2,5]");
  f(randn({3}));
  expect_stats(f, 2, 1);
  EXPECT_EQ(f.graph().type(f.graph().inputs[0]).str(), "f32[3]");  // the last one used
  f(big);
  expect_stats(f, 2, 2);
}

TEST(Cache, NewDtypeRetraces) {
  jit::Function f = square_plus_one(randn({3}));
  Tensor d = randn({3}, f64);
  Tensor i = from_vector<int32_t>({1, 2, 3});
  expect_same(f(d), d * d + 1);
  expect_same(f(i), i * i + 1);
  expect_stats(f, 3, 0);
  f(d);
  f(i);
  f(randn({3}));
  expect_stats(f, 3, 3);
}

TEST(Cache, RequiresGradRetraces) {
  Tensor x = randn({3});
  jit::Function f = square_plus_one(x);
  Tensor xg = x.detach().clone().requires_grad_();
  Tensor y = f(xg);
  expect_stats(f, 2, 0);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(f(x).requires_grad());
  expect_stats(f, 2, 1);
  y.sum().backward();  // the plan's ops were taped: eager backward through a traced call
  expect_same(xg.grad(), 2 * x);
}

TEST(Cache, GradModeIsPartOfTheSignature) {
  Tensor x = randn({3}).requires_grad_();
  jit::Function f = square_plus_one(x);
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(f(x).requires_grad());
    expect_stats(f, 2, 0);
    f(x);
    expect_stats(f, 2, 1);
  }
  EXPECT_TRUE(f(x).requires_grad());
  expect_stats(f, 2, 2);
}

TEST(Cache, LimitEvictsTheLeastRecentlyUsedPlan) {
  Tensor a = randn({1}), b = randn({2}), c = randn({3});
  jit::Function f = square_plus_one(a);
  f.set_cache_limit(2);
  f(b);
  f(a);  // a is now the most recent; b the least
  expect_stats(f, 2, 1);
  f(c);  // evicts b
  expect_stats(f, 3, 1);
  f(a);
  expect_stats(f, 3, 2);
  expect_same(f(b), b * b + 1);  // retraced, and evicts c
  expect_stats(f, 4, 2);
  f(c);
  expect_stats(f, 5, 2);
  f.set_cache_limit(1);
  f(c);
  expect_stats(f, 5, 3);
  f(b);
  f(c);
  expect_stats(f, 7, 3);
  EXPECT_THROW(f.set_cache_limit(0), Error);
}

TEST(Cache, CopiesShareOneCache) {
  jit::Function f = square_plus_one(randn({3}));
  jit::Function g = f;
  g(randn({3}));
  expect_stats(f, 1, 1);
}

TEST(Cache, ConcurrentCallsWithTwoSignaturesAreCorrect) {
  manual_seed(11);
  Tensor w = randn({4, 4});
  auto fn = [&](Tensor x) { return softmax(matmul(x, w.to(x.dtype())), -1) * 2 + x; };
  std::vector<Tensor> inputs;
  for (int i = 0; i < 8; ++i) inputs.push_back(i % 2 ? randn({3, 4}) : randn({2, 4}, f64));
  std::vector<Tensor> want;
  for (const Tensor& x : inputs) want.push_back(fn(x));
  jit::Function f = jit::trace(fn, {inputs[0]});
  constexpr int kThreads = 8, kCalls = 40;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        size_t k = static_cast<size_t>((t + i) % 8);
        if (!test::same_result(f(inputs[k]), want[k])) ++wrong;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  jit::Stats s = f.stats();
  EXPECT_EQ(s.hits + s.misses, 1 + kThreads * kCalls);
  EXPECT_EQ(s.traces, s.misses);
  // Each thread traces a signature at most once (two may race to trace the same one).
  EXPECT_GE(s.traces, 2);
  EXPECT_LE(s.traces, 1 + 2 * kThreads);
}

// graph() while other threads call with alternating signatures and a one-plan cache evicts the
// plan graph() reads: it returns a snapshot, so it never reads freed memory or a graph being
// written (TSan runs this; scripts/run.sh sanitize).
TEST(Cache, GraphIsASnapshotSafeBesideEvictingCalls) {
  manual_seed(12);
  auto fn = [](Tensor x) { return exp(x) * 2 + x; };
  Tensor a = randn({3, 4}), b = randn({5, 4});
  jit::Function f = jit::trace(fn, {a});
  f.set_cache_limit(1);
  f(a);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const Tensor& x = (t + i) % 2 ? a : b;
        if (!test::same_result(f(x), fn(x))) ++wrong;
      }
    });
  for (int i = 0; i < 200; ++i) {
    ir::Graph g = f.graph();
    std::string in = g.type(g.inputs.at(0)).str();
    EXPECT_TRUE(in == "f32[3,4]" || in == "f32[5,4]") << in;
  }
  stop = true;
  for (std::thread& th : callers) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kiln
