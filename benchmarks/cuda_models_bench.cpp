// benchmarks/cuda_models_bench.cpp -- kiln_cuda_bench's rows for the example models
// (examples/models/zoo.h) at full size on cuda:0, with the batches of
// examples::gpu_benchmark_batch, their usual optimizers, each step a whole training step ending
// in a synchronize (as benchmarks/torch_cuda_peer.py times PyTorch's under the same names):
//
//   cuda/model/NAME/eager           eager ops, fp32, TF32 off (kiln's default and PyTorch's for matmul)
//   cuda/model/NAME/traced          the step traced whole (replayed as a CUDA graph)
//   cuda/model/NAME/eager_tf32      ... with TF32 allowed in matmuls and convolutions
//   cuda/model/NAME/traced_tf32
//   cuda/model/NAME/eager_bf16      ... under autocast(bf16)
//   cuda/model/NAME/traced_bf16
//
// Three warm-up steps (the first traced one compiles), then 10 timed. Counters: peak_GB (the
// caching allocator's peak of memory in use over the warm-up and timed steps, parameters and
// optimizer state included, as torch.cuda.max_memory_allocated); the time is per step, in ms.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <kiln/kiln.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "examples/models/train.h"
#include "examples/models/zoo.h"

namespace kiln::bench {
namespace {

struct Variant {
  const char* name;
  bool traced, tf32;
  std::optional<DType> autocast;
};

constexpr int kWarmup = 3, kTimed = 10;

void model_step(benchmark::State& s, const std::string& model, const Variant& v) {
  const Device gpu = cuda::device(0);
  bool tf32_before = cuda::allow_tf32();
  cuda::set_allow_tf32(v.tf32);
  manual_seed(0);
  std::unique_ptr<examples::Task> task =
      examples::make_task(model, examples::Size::Full, examples::gpu_benchmark_batch(model));
  task->model().to(gpu);
  task->model().train();
  std::unique_ptr<optim::Optimizer> opt = examples::make_optimizer(model, *task);
  std::vector<Tensor> batch = examples::batch_on(*task, 0, gpu);
  auto step = [&](std::span<const Tensor> b) { return examples::train_step(*task, *opt, b); };
  std::optional<jit::Function> traced;
  auto run = [&] {
    std::optional<AutocastGuard> autocast;
    if (v.autocast) autocast.emplace(*v.autocast);
    if (v.traced && !traced) traced = jit::trace_tensors(step, batch, "train_step");
    Tensor loss = v.traced ? traced->call(batch)[0] : step(batch)[0];
    cuda::synchronize();
    return loss;
  };
  cuda::synchronize();
  cuda::reset_peak_memory_stats(0);
  for (int i = 0; i < kWarmup; ++i) run();
  for (auto _ : s) benchmark::DoNotOptimize(run());
  s.counters["peak_GB"] = static_cast<double>(cuda::memory_stats(0).peak_in_use) / 1e9;
  if (traced) s.SetLabel(fmt::format("graph replays {}", traced->stats().graph_replays));
  cuda::set_allow_tf32(tf32_before);
}

}  // namespace

/// Registers cuda/model/NAME/VARIANT for every example model (cuda_bench.cpp's main).
void register_model_cases() {
  static const Variant variants[] = {
      {"eager", false, false, std::nullopt},     {"traced", true, false, std::nullopt},
      {"eager_tf32", false, true, std::nullopt}, {"traced_tf32", true, true, std::nullopt},
      {"eager_bf16", false, false, DType::BF16}, {"traced_bf16", true, false, DType::BF16},
  };
  for (const std::string& model : examples::model_names())
    for (const Variant& v : variants)
      benchmark::RegisterBenchmark(fmt::format("cuda/model/{}/{}", model, v.name).c_str(),
                                   [model, &v](benchmark::State& s) {
                                     try {
                                       model_step(s, model, v);
                                     } catch (const std::exception& e) {
                                       s.SkipWithError(e.what());
                                     }
                                   })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(kTimed);
}

}  // namespace kiln::bench
