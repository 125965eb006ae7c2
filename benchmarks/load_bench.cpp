// benchmarks/load_bench.cpp -- saved modules: jit::load and the first call in a fresh process
// (this binary run again with --kiln-load-first-call), with the disk cache warm and cold, and
// the cost of a call that finds its plan on a loaded function beside a traced one.
//
// The digits forward (examples/digits_net.h) is saved with a dynamic batch dim. The child
// times jit::load through the end of its first call (batch 1); the parent times the whole
// child process, so process start, library loading and exit are the difference, reported as
// the process_ms counter.
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
#include "examples/digits_net.h"
#include "runtime/files.h"

using namespace kiln;

namespace {

namespace fs = std::filesystem;

// The digits forward, saved once per process (dynamic batch N).
const std::string& digits_module() {
  static const std::string path = [] {
    std::string p = (fs::temp_directory_path() / fmt::format("kiln-bench-digits-{}.kiln", ::getpid())).string();
    NoGradGuard g;
    manual_seed(0);
    examples::DigitsNet net;
    net.eval();
    jit::save_module(net, randn({64, 1, 8, 8}), p, jit::SaveOptions().dynamic(0, 0, "N"));
    std::atexit([] { fs::remove(fs::temp_directory_path() / fmt::format("kiln-bench-digits-{}.kiln", ::getpid())); });
    return p;
  }();
  return path;
}

void BM_LoadFirstCall(benchmark::State& s, bool warm) {
  std::string dir = (fs::temp_directory_path() / fmt::format("kiln-bench-load-cache-{}", ::getpid())).string();
  fs::remove_all(dir);
  // The probe is built beside this binary.
  std::string probe =
      (fs::read_symlink(fmt::format("/proc/{}/exe", ::getpid())).parent_path() / "kiln_load_probe").string();
  std::vector<std::string> argv = {probe, digits_module()};
  if (warm) files::run_program(argv, {"KILN_CACHE_DIR=" + dir});  // fills the disk cache
  double process = 0;
  for (auto _ : s) {
    auto t0 = std::chrono::steady_clock::now();
    std::optional<std::string> out = files::run_program(argv, {"KILN_CACHE_DIR=" + (warm ? dir : std::string("off"))});
    double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double ms = out && !out->empty() ? std::atof(out->c_str()) : -1;
    if (ms < 0) s.SkipWithError("the child process failed");
    s.SetIterationTime(ms / 1e3);
    process += wall - ms;
  }
  s.counters["process_ms"] = process / static_cast<double>(s.iterations());
  fs::remove_all(dir);
}
BENCHMARK_CAPTURE(BM_LoadFirstCall, cold, false)
    ->Name("load_first_call_cold_cache/jit")
    ->UseManualTime()
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_LoadFirstCall, warm, true)
    ->Name("load_first_call_warm_disk_cache/jit")
    ->UseManualTime()
    ->Iterations(5);

// A call that finds its plan: the loaded digits forward beside the same forward traced, at
// batch 1 (the fixed cost shows).
void BM_LoadedCall(benchmark::State& s) {
  NoGradGuard g;
  jit::LoadedFunction f = jit::load(digits_module());
  Tensor x = randn({1, 1, 8, 8});
  benchmark::DoNotOptimize(f(x));
  for (auto _ : s) benchmark::DoNotOptimize(f(x));
}
void BM_TracedCall(benchmark::State& s) {
  NoGradGuard g;
  manual_seed(0);
  examples::DigitsNet net;
  net.eval();
  Tensor x = randn({1, 1, 8, 8});
  jit::Function f = jit::trace_module(net, x);
  benchmark::DoNotOptimize(f(x));
  for (auto _ : s) benchmark::DoNotOptimize(f(x));
}
BENCHMARK(BM_TracedCall)->Name("digits_forward_call[1]/jit");
BENCHMARK(BM_LoadedCall)->Name("digits_forward_call_loaded[1]/jit");  // its own row in the table

}  // namespace
