// benchmarks/eager_bench.cpp -- the eager path: per-op cost on tiny tensors, bandwidth on
// large ones beside a plain copy loop, matmul, a training step (jit_bench.cpp: fused chains).
#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

#include "benchmarks/bench_cases.h"
#include "benchmarks/copy_limit.h"

using namespace kiln;

namespace {

constexpr int64_t k16M = 16 << 20;

void BM_AddTiny(benchmark::State& s) {
  Tensor a = randn({s.range(0)}), b = randn({s.range(0)});
  benchmark::DoNotOptimize(a + b);  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_AddTiny)->Name("add_tiny[1]/kiln")->Arg(1);
BENCHMARK(BM_AddTiny)->Name("add_tiny[64]/kiln")->Arg(64);

void BM_MulScalarTiny(benchmark::State& s) {
  Tensor a = randn({s.range(0)});
  benchmark::DoNotOptimize(a * 0.5f);  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(a * 0.5f);
}
BENCHMARK(BM_MulScalarTiny)->Name("mul_scalar_tiny[1]/kiln")->Arg(1);
BENCHMARK(BM_MulScalarTiny)->Name("mul_scalar_tiny[64]/kiln")->Arg(64);

// The same sum through a registered op (runtime/registered_op.h) whose CPU kernel is a + b:
// beside add_tiny, what a call's schema check, rule and kernel dispatch cost.
void BM_RegisteredAddTiny(benchmark::State& s) {
  static const RegisteredOp& add = register_op("bench::add(Tensor a, Tensor b) -> Tensor")
                                       .rule([](const OpCall& c) { return c.input(0).type(); })
                                       .cpu([](const OpCall& c) { return c.input(0) + c.input(1); });
  Tensor a = randn({s.range(0)}), b = randn({s.range(0)});
  benchmark::DoNotOptimize(add(a, b));
  for (auto _ : s) benchmark::DoNotOptimize(add(a, b));
}
BENCHMARK(BM_RegisteredAddTiny)->Name("add_tiny[1]/registered")->Arg(1);

// The bandwidth limit: a plain copy of 16M floats (copy_limit.h).
void BM_Copy(benchmark::State& s) { bench::copy_case(s, k16M * 4); }
BENCHMARK(BM_Copy)->Name("add_16M/copy")->UseRealTime();

void BM_Add16M(benchmark::State& s) {
  Tensor a = randn({k16M}), b = randn({k16M});
  benchmark::DoNotOptimize(a + b);  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(a + b);
  s.SetBytesProcessed(s.iterations() * k16M * 4 * 3);
}
BENCHMARK(BM_Add16M)->Name("add_16M/kiln")->UseRealTime();

void BM_Tanh16M(benchmark::State& s) {
  Tensor a = randn({k16M});
  benchmark::DoNotOptimize(tanh(a));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(tanh(a));
  s.SetBytesProcessed(s.iterations() * k16M * 4 * 2);
}
BENCHMARK(BM_Tanh16M)->Name("tanh_16M/kiln")->UseRealTime();

// The same with the caching allocator turned off: every 64 MiB temporary is mapped, faulted
// in and unmapped again, as with plain malloc.
void BM_Gelu9NoCache(benchmark::State& s) {
  Tensor a = randn({k16M});
  int64_t limit = cpu_allocator().stats().cache_limit;
  cpu_allocator().set_cache_limit(0);
  for (auto _ : s) benchmark::DoNotOptimize(bench::gelu_9ops(a));
  cpu_allocator().set_cache_limit(limit);
  s.SetBytesProcessed(s.iterations() * k16M * 4 * 2);
}
BENCHMARK(BM_Gelu9NoCache)->Name("gelu_9ops_16M_no_cache/kiln")->UseRealTime();

void BM_Matmul(benchmark::State& s) {
  Tensor a = randn({1024, 1024}), b = randn({1024, 1024});
  benchmark::DoNotOptimize(matmul(a, b));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(matmul(a, b));
  bench::count_flops(s, 2.0 * 1024 * 1024 * 1024);
}
BENCHMARK(BM_Matmul)->Name("matmul_1024/kiln")->UseRealTime();

}  // namespace

// ---- autograd: recording cost and a training step ---------------------------------------

namespace {

void BM_AddTinyGrad(benchmark::State& s) {
  Tensor a = randn({s.range(0)}).requires_grad_(), b = randn({s.range(0)}).requires_grad_();
  benchmark::DoNotOptimize(a + b);
  for (auto _ : s) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_AddTinyGrad)->Name("add_tiny_taped[1]/kiln")->Arg(1);
BENCHMARK(BM_AddTinyGrad)->Name("add_tiny_taped[64]/kiln")->Arg(64);

// The MLP training step: step_bench.cpp.

}  // namespace
