// benchmarks/models_bench.cpp -- a training step of each example model (examples/models/zoo.h,
// at its bench size), eagerly (kiln) and as a traced whole step (jit); torch_models_bench.cpp
// times the same models through LibTorch. Each case counts the step's GEMM and convolution
// FLOPs (from its traced graph), so the table sets it beside matmul_1024's rate in the same run.
#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

#include <string>

#include "benchmarks/bench_cases.h"
#include "examples/models/zoo.h"

using namespace kiln;

namespace {

void model_step(benchmark::State& s, const std::string& name, bool traced) {
  manual_seed(0);
  std::unique_ptr<examples::Task> task = examples::make_task(name, examples::Size::Bench);
  std::unique_ptr<optim::Optimizer> opt = examples::make_optimizer(name, *task);
  std::vector<Tensor> batch = task->batch(0);
  jit::Function step = jit::trace_tensors(
      [&](std::span<const Tensor> b) { return examples::train_step(*task, *opt, b); }, batch, name + "_step");
  step.call(batch);  // compiled and run once, untimed; its graph gives the FLOPs
  double flops = bench::gemm_conv_flops(step.graph());
  auto run = [&] { return traced ? step.call(batch)[0] : examples::train_step(*task, *opt, batch)[0]; };
  benchmark::DoNotOptimize(run());
  for (auto _ : s) benchmark::DoNotOptimize(run());
  bench::count_flops(s, flops);
}

[[maybe_unused]] const bool models_registered = [] {
  for (const std::string& name : examples::model_names())
    for (bool traced : {false, true})
      benchmark::RegisterBenchmark((bench::model_case(name) + (traced ? "/jit" : "/kiln")).c_str(),
                                   [name, traced](benchmark::State& s) { model_step(s, name, traced); })
          ->UseRealTime()
          ->MinTime(0.5);
  return true;
}();

}  // namespace
