// benchmarks/cuda_profile.cpp -- kiln_cuda_profile: the example models' training steps on cuda:0
// under kiln's profiler, each step explained by its device kernels (scripts/gpu_pack.sh run OUT
// profile runs it beside benchmarks/torch_cuda_peer.py --profile; compare_cuda_profiles.py puts
// the two side by side in OUT/profile.md).
//
//   kiln_cuda_profile [--models a,b] [--variants eager,traced] [--size full|tiny] [--steps N]
//                     [--top N] [--peak H200] [--json PATH] [--traces DIR]
//
// Per model and variant (eager ops, or the step traced whole and replayed as a CUDA graph), at
// the batches of examples::gpu_benchmark_batch, fp32 with TF32 off: three warm-up steps (the
// first traced one compiles), then --steps recorded, each ending in a synchronize. One JSON
// object a line (written as each finishes, so a timeout keeps the rows before it):
//   wall_ms, device_busy_ms    per step: the host's clock, and the time some device was busy
//   kiln_launches, device_kernels
//                              per step: kernels kiln launched, kernels the device ran (a
//                              library call may run several)
//   plan_bytes, plan_bound_ms, eager_floor_bytes, eager_floor_ms
//                              per step on --peak (jit/cost.h): the traced plan's bytes and its
//                              kernels' roofline bounds summed; what an eager step must move,
//                              and its bound
//   top                        the kernels by device time: calls and ms per step, share,
//                              achieved GB/s and TFLOP/s, % of the device's peaks (its
//                              attributes'), and the roofline bound of their bytes and FLOPs on
//                              --peak (kiln's kernels, whose counts are known)
//   missing                    why there is no device timeline ("" when there is)
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "examples/models/train.h"
#include "examples/models/zoo.h"

namespace kiln {
namespace {

struct Options {
  std::vector<std::string> models, variants = {"eager", "traced"};
  examples::Size size = examples::Size::Full;
  int steps = 3, warmup = 3;
  size_t top = 20;
  std::string peak = "H200", json, traces;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

nlohmann::json profile(const std::string& model, const std::string& variant, const Options& o) {
  const Device gpu = cuda::device(0);
  const jit::DevicePeak& peak = jit::device_peak(o.peak);
  bool traced_variant = variant == "traced";
  examples::require(traced_variant || variant == "eager", fmt::format("no variant '{}' (eager, traced)", variant));
  cuda::set_allow_tf32(false);
  manual_seed(0);
  int64_t batch_size = o.size == examples::Size::Full ? examples::gpu_benchmark_batch(model) : 0;
  std::unique_ptr<examples::Task> task = examples::make_task(model, o.size, batch_size);
  task->model().to(gpu);
  task->model().train();
  std::unique_ptr<optim::Optimizer> opt = examples::make_optimizer(model, *task);
  std::vector<Tensor> batch = examples::batch_on(*task, 0, gpu);
  auto step = [&](std::span<const Tensor> b) { return examples::train_step(*task, *opt, b); };
  // Tracing runs nothing: the eager variant is costed from the same trace.
  jit::Function traced = jit::trace_tensors(step, batch, "train_step");
  auto run = [&] {
    Tensor loss = traced_variant ? traced.call(batch)[0] : step(batch)[0];
    cuda::synchronize();
  };
  for (int i = 0; i < o.warmup; ++i) run();
  int64_t launches_before = cuda::kernel_launches();
  profiler::start();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) run();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  profiler::stop(o.traces.empty() ? "" : fmt::format("{}/{}_{}.json", o.traces, model, variant));
  int64_t launches = cuda::kernel_launches() - launches_before;
  profiler::DeviceSummary d = profiler::device_summary();

  const double steps = o.steps;
  jit::PlanCost plan = traced.cost(peak.multiprocessors);
  jit::EagerFloor floor = traced.eager_floor();
  double math_seconds = 0;  // the floor's FLOPs alone: PyTorch's floor (its own bytes) shares them
  for (const jit::KernelCost& k : floor.math) math_seconds += k.flops / k.rate(peak);
  nlohmann::json row = {
      {"model", model},
      {"variant", variant},
      {"batch", batch_size},
      {"steps", o.steps},
      {"peak", peak.name},
      {"wall_ms", 1e3 * wall / steps},
      {"device_busy_ms", static_cast<double>(d.busy_ns) / 1e6 / steps},
      {"device_total_ms", static_cast<double>(d.total_ns) / 1e6 / steps},
      {"kiln_launches", static_cast<double>(launches) / steps},
      {"device_kernels", static_cast<double>(d.launches) / steps},
      {"peak_bandwidth", peak.bandwidth},
      {"plan_bytes", plan.bytes()},
      {"plan_bound_ms", 1e3 * plan.bound(peak)},
      {"eager_floor_bytes", floor.bytes()},
      {"eager_floor_ms", 1e3 * floor.bound(peak)},
      {"eager_floor_math_ms", 1e3 * math_seconds},
      {"missing", d.missing},
  };
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < d.kernels.size() && i < o.top; ++i) {
    const profiler::DeviceKernel& k = d.kernels[i];
    auto [peak_bw, peak_fp32] = d.peak(k.device);
    nlohmann::json r = {
        {"name", k.name},
        {"kiln", k.kiln},
        {"calls", static_cast<double>(k.calls) / steps},
        {"ms", static_cast<double>(k.total_ns) / 1e6 / steps},
        {"share", d.total_ns > 0 ? static_cast<double>(k.total_ns) / static_cast<double>(d.total_ns) : 0.0},
    };
    if (k.known_ns > 0) {
      r["gbps"] = k.bandwidth() / 1e9;
      r["tflops"] = k.flop_rate() / 1e12;
      if (peak_bw > 0) r["pct_bw"] = 100 * k.bandwidth() / peak_bw;
      if (peak_fp32 > 0) r["pct_fp32"] = 100 * k.flop_rate() / peak_fp32;
      // The bound of the bytes and FLOPs of its calls whose counts are known, scaled to all.
      jit::KernelCost c;
      c.bytes_read = static_cast<int64_t>(k.bytes);
      c.flops = k.flops;
      double share = static_cast<double>(k.total_ns) / static_cast<double>(k.known_ns);
      r["bound_us"] = 1e6 * c.bound(peak) * share / steps;
    }
    top.push_back(std::move(r));
  }
  row["top"] = std::move(top);
  return row;
}

int run(int argc, char** argv) {
  Options o;
  std::string models, variants = "eager,traced", size = "full";
  CLI::App app{"kiln_cuda_profile: the example models' training steps on cuda:0, kernel by kernel"};
  app.add_option("--models", models, "comma-separated (default: all)");
  app.add_option("--variants", variants, "eager,traced");
  app.add_option("--size", size, "full (the GPU benchmark's batches) or tiny")->check(CLI::IsMember({"full", "tiny"}));
  app.add_option("--steps", o.steps, "steps recorded")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", o.warmup, "steps before")->check(CLI::Range(0, 1000));
  app.add_option("--top", o.top, "kernels per row");
  app.add_option("--peak", o.peak, "the device the bounds are for: A100, H100, H200");
  app.add_option("--json", o.json, "where the rows go (one JSON object a line; default stdout)");
  app.add_option("--traces", o.traces, "a directory for each row's Perfetto trace");
  CLI11_PARSE(app, argc, argv);
  o.models = models.empty() ? examples::model_names() : split(models);
  o.variants = split(variants);
  o.size = size == "tiny" ? examples::Size::Tiny : examples::Size::Full;
  jit::device_peak(o.peak);  // an unknown name fails now, not after the first model
  if (!cuda::is_available()) {
    std::cerr << "kiln_cuda_profile: no CUDA device: " << cuda::unavailable_reason() << "\n";
    return 1;
  }
  std::ofstream file;
  if (!o.json.empty()) file.open(o.json, std::ios::app);
  std::ostream& out = o.json.empty() ? std::cout : file;
  int status = 0;
  for (const std::string& model : o.models)
    for (const std::string& variant : o.variants) {
      try {
        nlohmann::json row = profile(model, variant, o);
        out << row.dump() << std::endl;
        std::string missing = row["missing"];
        std::cerr << fmt::format("{}/{}: {:.2f} ms a step, the device busy {:.2f} ms, {} kernels{}\n", model, variant,
                                 row["wall_ms"].get<double>(), row["device_busy_ms"].get<double>(),
                                 row["device_kernels"].get<double>(),
                                 missing.empty() ? "" : " (no device timeline: " + missing + ")");
      } catch (const std::exception& e) {  // an out-of-memory, a refused kernel: the next row still runs
        std::cerr << fmt::format("{}/{}: failed: {}\n", model, variant, e.what());
        status = 1;
      }
    }
  return status;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::run(argc, argv); }
