// tests/jit/differential_test.cpp -- random programs run eagerly, traced, and from the traced
// graph's text: the same bits op by op, and within rounding through fused kernels.
#include <fmt/format.h>
#include <gtest/gtest-spi.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "ir/passes.h"
#include "jit/kernel_cache.h"
#include "jit/run.h"
#include "jit/tracer.h"
#include "jit_test_util.h"
#include "random_program.h"

namespace kiln {
namespace {

// How many programs, from which seed: KILN_DIFF_PROGRAMS (default 250) and KILN_DIFF_SEED
// (default 0). The README gives the command for a 10,000-program run.
uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}
const uint64_t kPrograms = env_or("KILN_DIFF_PROGRAMS", 250);
const uint64_t kFirstSeed = env_or("KILN_DIFF_SEED", 0);

// Runs check(seed) for every seed, each program's failures captured rather than reported, so the
// run goes on and counts them all: each failing seed is reported once with its first failure
// (the first 10 in full), and the total at the end.
template <class Check> void for_each_program(const char* mode, Check check) {
  std::vector<uint64_t> failed;
  for (uint64_t seed = kFirstSeed; seed < kFirstSeed + kPrograms; ++seed) {
    testing::TestPartResultArray results;
    {
      testing::ScopedFakeTestPartResultReporter capture(
          testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
      check(seed);
    }
    for (int i = 0; i < results.size(); ++i) {
      if (!results.GetTestPartResult(i).failed()) continue;
      failed.push_back(seed);
      std::string first = results.GetTestPartResult(i).message();
      if (failed.size() <= 10) ADD_FAILURE() << mode << ": seed " << seed << " fails; first difference:\n" << first;
      else ADD_FAILURE() << mode << ": seed " << seed << " fails";
      break;
    }
  }
  std::printf("%s: %zu of %llu programs (seeds %llu to %llu) failed%s\n", mode, failed.size(),
              static_cast<unsigned long long>(kPrograms), static_cast<unsigned long long>(kFirstSeed),
              static_cast<unsigned long long>(kFirstSeed + kPrograms - 1), failed.empty() ? "" : ":");
  for (uint64_t s : failed) std::printf(" %llu", static_cast<unsigned long long>(s));
  if (!failed.empty()) std::printf("\n");
}

void expect_all_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(fmt::format("{}: output {}", what, i));
    test::expect_same(got[i], want[i]);
  }
}

int fused_groups = 0;  // formed across the programs: the fused path is really exercised

void check_runs(const test::Program& p, uint64_t seed) {
  std::vector<Tensor> want = p.run(p.args);
  jit::Function f([&p](std::span<const Tensor> a) { return p.run(a); }, "prog", p.captured);
  expect_all_same(f.call(p.args), want, "traced");
  std::vector<Tensor> args = p.fresh_args();
  want = p.run(args);
  expect_all_same(f.call(args), want, "traced, new data");
  EXPECT_EQ(f.stats().traces, 1);

  // The graph f runs, made the way f makes it (f.graph() would also resolve source lines,
  // which costs an addr2line run per program).
  jit::Trace t = jit::trace_function([&p](std::span<const Tensor> a) { return p.run(a); }, args, "prog", p.captured);
  std::string text = test::text_of(ir::run_passes(std::move(t.graph), ir::default_pipeline()));
  SCOPED_TRACE("the graph:\n" + text);
  ir::Graph back = ir::parse(text, fmt::format("seed{}.ir", seed));
  ASSERT_NO_THROW(ir::verify(back));
  EXPECT_EQ(test::text_of(back), text);
  expect_all_same(jit::run_graph(back, args, t.params), want, "parsed graph");

  // The fuse pass keeps the meaning: its groups, run op by op, give the same bits, and the
  // fused graph's text round-trips.
  ir::Graph fused = ir::fuse(back);
  ASSERT_NO_THROW(ir::verify(fused));
  test::expect_round_trip(fused);
  std::vector<Tensor> interpreted = jit::run_graph(fused, args, t.params);
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(fmt::format("fused graph, op by op: output {}", i));
    EXPECT_TRUE(test::bitwise_equal(interpreted[i], want[i])) << interpreted[i] << want[i];
  }
  for (const ir::Node& n : fused.nodes) fused_groups += n.kind == ir::NodeKind::Fused;
}

void check_program(uint64_t seed) {
  SCOPED_TRACE(fmt::format("seed {}", seed));
  try {
    test::Program p = test::random_program(seed, 6 + static_cast<int>(seed % 10));
    SCOPED_TRACE("the program:\n" + p.text);
    try {
      check_runs(p, seed);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "generating: " << e.what();
  }
}

TEST(Differential, RandomProgramsAgreeEagerTracedFusedAndReparsed) {
  jit::KernelCacheStats before = jit::kernel_cache_stats();
  for_each_program("forward", check_program);
  jit::KernelCacheStats after = jit::kernel_cache_stats();
  EXPECT_GT(fused_groups, static_cast<int>(kPrograms) / 4);
  if (jit::fusion_enabled()) {
    EXPECT_GT(after.hits + after.misses - before.hits - before.misses, kPrograms / 4);
  }
  std::printf("%d fused groups in %d programs; %lld kernel lookups, %lld compiled\n", fused_groups,
              static_cast<int>(kPrograms),
              static_cast<long long>(after.hits + after.misses - before.hits - before.misses),
              static_cast<long long>(after.compiles - before.compiles));
}

// Backward mode: random arguments and captured tensors require grad; the gradients of random
// projections of the results, through fast(...) and its compiled backward, equal eager's.
int compiled_backwards = 0;  // programs whose results hung off a compiled backward

void check_gradients(test::Program& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto coin = [&] { return rng() % 2 == 0; };
  std::vector<Tensor> args, wrt;
  for (const Tensor& a : p.args) {
    Tensor x = a.detach().clone();
    if (is_float(x.dtype()) && coin()) wrt.push_back(x.requires_grad_());
    args.push_back(x);
  }
  for (auto& [name, c] : p.captured)
    if (is_float(c.dtype()) && coin()) wrt.push_back(c.requires_grad_());
  if (wrt.empty()) return;
  // The gradients of sum(result_i * seed_i) over the results that need one.
  auto grads = [&](const std::vector<Tensor>& outs) {
    std::vector<Tensor> diff, seeds;
    manual_seed(seed);
    for (const Tensor& o : outs)
      if (o.requires_grad()) diff.push_back(o), seeds.push_back(randn(o.shape(), o.dtype()));
    if (diff.empty()) return std::vector<Tensor>(wrt.size());
    return autograd::grad(diff, wrt, seeds, false, false, /*allow_unused=*/true);
  };
  std::vector<Tensor> want;
  try {
    want = grads(p.run(args));
  } catch (const Error& e) {  // an op without a derivative: the compiled call says so too
    jit::Function f([&p](std::span<const Tensor> a) { return p.run(a); }, "prog", p.captured);
    EXPECT_THROW(grads(f.call(args)), Error) << "eagerly: " << e.what();
    return;
  }
  jit::Function f([&p](std::span<const Tensor> a) { return p.run(a); }, "prog", p.captured);
  std::vector<Tensor> outs = f.call(args);
  for (const Tensor& o : outs)
    if (o.grad_fn_name() == "jit @prog") {
      ++compiled_backwards;
      break;
    }
  std::vector<Tensor> got = grads(outs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(fmt::format("gradient of input {} that requires grad", i));
    ASSERT_EQ(got[i].defined(), want[i].defined());
    if (want[i].defined()) test::expect_same(got[i], want[i]);
  }
}

TEST(Differential, RandomProgramsGradientsAgreeCompiledAndEager) {
  for_each_program("backward", [](uint64_t seed) {
    SCOPED_TRACE(fmt::format("seed {}", seed));
    test::Program p = test::random_program(seed, 6 + static_cast<int>(seed % 10));
    SCOPED_TRACE("the program:\n" + p.text);
    try {
      check_gradients(p, seed);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  });
  EXPECT_GT(compiled_backwards, static_cast<int>(kPrograms) / 3);
  std::printf("%d of %d programs ran a compiled backward\n", compiled_backwards, static_cast<int>(kPrograms));
}

TEST(Differential, GeneratorIsDeterministic) {
  for (uint64_t seed : {3u, 77u}) {
    test::Program a = test::random_program(seed), b = test::random_program(seed);
    EXPECT_EQ(a.text, b.text);
    ASSERT_EQ(a.args.size(), b.args.size());
    for (size_t i = 0; i < a.args.size(); ++i) EXPECT_TRUE(test::bitwise_equal(a.args[i], b.args[i]));
  }
}

}  // namespace
}  // namespace kiln
