// benchmarks/jit_bench.cpp -- traced functions: fused chains and reductions beside eager kiln,
// the plain copy loop that bounds them, and (torch_bench.cpp) LibTorch; then what compiling
// costs: the first call in a fresh process, with the disk cache cold and warm, and a call that
// finds its plan.
//
// Impl names: kiln = eager from primitive ops, kiln_op = kiln's own op, jit = traced (fused),
// torch = LibTorch eager from the same primitive ops, torch_op = LibTorch's own kernel,
// copy = a plain copy moving the bytes the case must move (copy_limit.h).
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "benchmarks/bench_cases.h"
#include "benchmarks/copy_limit.h"
#include "runtime/files.h"

using namespace kiln;

namespace {

void copy_bytes(benchmark::State& s, int64_t bytes) { bench::copy_case(s, bytes); }

// Runs fn on the inputs in the timing loop after one untimed call (which traces and compiles).
template <class F> void run_loop(benchmark::State& s, F fn, int64_t bytes) {
  benchmark::DoNotOptimize(fn());
  for (auto _ : s) benchmark::DoNotOptimize(fn());
  s.SetBytesProcessed(s.iterations() * bytes);
}

// ---- gelu (tanh approximation) as 9 primitive ops ----------------------------------------

void BM_GeluCopy(benchmark::State& s) { copy_bytes(s, s.range(0) * 4); }
void BM_GeluEager(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({s.range(0)});
  run_loop(
      s, [&] { return bench::gelu_9ops(x); }, s.range(0) * 8);
}
void BM_GeluOp(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({s.range(0)});
  run_loop(
      s, [&] { return gelu(x, "tanh"); }, s.range(0) * 8);
}
void BM_GeluJit(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({s.range(0)});
  jit::Function f = jit::trace(bench::gelu_9ops, {x});
  run_loop(
      s, [&] { return f(x); }, s.range(0) * 8);
}
BENCHMARK(BM_GeluCopy)->Name("gelu_9ops_1M/copy")->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_GeluEager)->Name("gelu_9ops_1M/kiln")->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_GeluOp)->Name("gelu_9ops_1M/kiln_op")->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_GeluJit)->Name("gelu_9ops_1M/jit")->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_GeluCopy)->Name("gelu_9ops_16M/copy")->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_GeluEager)->Name("gelu_9ops_16M/kiln")->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_GeluOp)->Name("gelu_9ops_16M/kiln_op")->Arg(16 << 20)->UseRealTime();
BENCHMARK(BM_GeluJit)->Name("gelu_9ops_16M/jit")->Arg(16 << 20)->UseRealTime();

// ---- softmax and layer_norm over the last dim of [4096, 1024] -----------------------------

constexpr int64_t kRows = 4096, kCols = 1024, kRowBytes = kRows * kCols * 4 * 2;

void BM_SoftmaxCopy(benchmark::State& s) { copy_bytes(s, kRows * kCols * 4); }
void BM_SoftmaxEager(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({kRows, kCols});
  run_loop(
      s, [&] { return bench::softmax_prims(x); }, kRowBytes);
}
void BM_SoftmaxOp(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({kRows, kCols});
  run_loop(
      s, [&] { return softmax(x, -1); }, kRowBytes);
}
void BM_SoftmaxJit(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({kRows, kCols});
  jit::Function f = jit::trace(bench::softmax_prims, {x});
  run_loop(
      s, [&] { return f(x); }, kRowBytes);
}
BENCHMARK(BM_SoftmaxCopy)->Name("softmax_4096x1024/copy")->UseRealTime();
BENCHMARK(BM_SoftmaxEager)->Name("softmax_4096x1024/kiln")->UseRealTime();
BENCHMARK(BM_SoftmaxOp)->Name("softmax_4096x1024/kiln_op")->UseRealTime();
BENCHMARK(BM_SoftmaxJit)->Name("softmax_4096x1024/jit")->UseRealTime();

void BM_LayerNormCopy(benchmark::State& s) { copy_bytes(s, kRows * kCols * 4); }
void BM_LayerNormEager(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({kRows, kCols}), w = randn({kCols}), b = randn({kCols});
  run_loop(
      s, [&] { return bench::layer_norm_prims(x, w, b); }, kRowBytes);
}
void BM_LayerNormOp(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({kRows, kCols}), w = randn({kCols}), b = randn({kCols});
  run_loop(
      s, [&] { return layer_norm(x, {kCols}, w, b); }, kRowBytes);
}
void BM_LayerNormJit(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({kRows, kCols}), w = randn({kCols}), b = randn({kCols});
  jit::Function f = jit::trace(bench::layer_norm_prims, {x, w, b});
  run_loop(
      s, [&] { return f(x, w, b); }, kRowBytes);
}
BENCHMARK(BM_LayerNormCopy)->Name("layer_norm_4096x1024/copy")->UseRealTime();
BENCHMARK(BM_LayerNormEager)->Name("layer_norm_4096x1024/kiln")->UseRealTime();
BENCHMARK(BM_LayerNormOp)->Name("layer_norm_4096x1024/kiln_op")->UseRealTime();
BENCHMARK(BM_LayerNormJit)->Name("layer_norm_4096x1024/jit")->UseRealTime();

// ---- an MLP forward: 784 -> 512, gelu, -> 10, softmax ---------------------------------------

void BM_MlpForward(benchmark::State& s, bool traced) {
  NoGradGuard g;
  manual_seed(0);
  bench::Mlp m;
  Tensor x = randn({s.range(0), 784});
  auto forward = [&m](Tensor in) { return m.forward(in); };
  if (!traced) {
    run_loop(
        s, [&] { return forward(x); }, 0);
    return;
  }
  jit::Function f = jit::trace(forward, {x});
  run_loop(
      s, [&] { return f(x); }, 0);
}
BENCHMARK_CAPTURE(BM_MlpForward, eager, false)->Name("mlp_forward[256]/kiln")->Arg(256)->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpForward, traced, true)->Name("mlp_forward[256]/jit")->Arg(256)->UseRealTime();

// ---- what compiling costs ------------------------------------------------------------------

// A call that finds its plan, on a 1-element input: the fixed cost of a compiled call.
void BM_CacheHit(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({1});
  jit::Function f = jit::trace(bench::two_ops, {x});
  run_loop(
      s, [&] { return f(x); }, 0);
}
void BM_CacheHitEager(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({1});
  run_loop(
      s, [&] { return bench::two_ops(x); }, 0);
}
BENCHMARK(BM_CacheHit)->Name("call_cached[1]/jit");
BENCHMARK(BM_CacheHitEager)->Name("call_cached[1]/kiln");

// The same two calls while the profiler records (bench_main prints the cost per event site
// beside the rows above, where it is off). Recording restarts now and then, which drops what
// was recorded: memory stays bounded however long Google Benchmark runs.
template <class F> void run_profiled(benchmark::State& s, F fn) {
  benchmark::DoNotOptimize(fn());
  profiler::start();
  int64_t n = 0;
  for (auto _ : s) {
    benchmark::DoNotOptimize(fn());
    if (++n % 20000 == 0) profiler::start();
  }
  profiler::stop();
}
void BM_CacheHitProfiled(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({1});
  jit::Function f = jit::trace(bench::two_ops, {x});
  run_profiled(s, [&] { return f(x); });
}
void BM_CacheHitEagerProfiled(benchmark::State& s) {
  NoGradGuard g;
  Tensor x = randn({1});
  run_profiled(s, [&] { return bench::two_ops(x); });
}
BENCHMARK(BM_CacheHitProfiled)->Name("call_cached[1]/jit_profiled");
BENCHMARK(BM_CacheHitEagerProfiled)->Name("call_cached[1]/kiln_profiled");

// The first call of the gelu chain in a fresh process (this binary, run again with
// --kiln-first-call): trace, passes, fusion, then either the LLVM compile (disk cache off) or
// the object read from a warm disk cache, and the run. The child reports its own time.
void BM_FirstCall(benchmark::State& s, bool warm) { bench::first_call_in_child(s, warm, "--kiln-first-call"); }
BENCHMARK_CAPTURE(BM_FirstCall, cold, false)->Name("first_call_cold_cache/jit")->UseManualTime()->Iterations(5);
BENCHMARK_CAPTURE(BM_FirstCall, warm, true)->Name("first_call_warm_disk_cache/jit")->UseManualTime()->Iterations(5);

}  // namespace

namespace kiln::bench {

// The child's side of BM_FirstCall: prints the first call's milliseconds.
int first_call_probe() {
  NoGradGuard g;
  Tensor x = randn({4096});
  auto t0 = std::chrono::steady_clock::now();
  jit::Function f = jit::trace(gelu_9ops, {x});
  f(x);  // trace() only traces: the first call compiles (or loads) the kernels and runs them
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%.4f\n", ms);
  return 0;
}

}  // namespace kiln::bench
