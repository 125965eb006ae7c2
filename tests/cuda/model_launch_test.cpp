// tests/cuda/model_launch_test.cpp -- every fused group of each example model's traced training
// step, at full size on CUDA tensors, planned for a 132-multiprocessor GPU (an H100 or H200)
// without running: a group with a million elements of work or more launches at least two
// blocks per multiprocessor. Tracing runs no kernel, so this needs no GPU, only the host CUDA's
// memory for the models' parameters.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <string>

#include "cuda/group.h"
#include "examples/models/zoo.h"
#include "ir/graph.h"
#include "jit/cost.h"
#include "jit/trace.h"
#include "tests/cuda/cuda_test.h"

namespace kiln {
namespace {

using examples::Size;
using test::kGpu;

constexpr int kSms = 132;

class ModelLaunch : public ::testing::TestWithParam<std::string> {};

// Under AddressSanitizer the largest models' full-size construction and trace take minutes
// (GNMT's 50 unrolled steps of 8 LSTM layers, VGG's 143M parameters); the unsanitized suite
// plans them, and the sanitized one the rest.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST_P(ModelLaunch, EveryBigGroupFillsA132MultiprocessorGpu) {
  REQUIRE_CUDA();
  const std::string& name = GetParam();
  if (kSanitized && (name == "gnmt" || name == "vgg19_bn" || name == "alexnet"))
    GTEST_SKIP() << name << " is planned by the unsanitized suite (minutes under AddressSanitizer)";
  manual_seed(1);
  std::unique_ptr<examples::Task> task = examples::make_task(name, Size::Full, examples::gpu_benchmark_batch(name));
  task->model().to(kGpu);
  std::unique_ptr<optim::Optimizer> opt = examples::make_optimizer(name, *task);
  std::vector<Tensor> batch;
  for (const Tensor& x : task->batch(0)) batch.push_back(x.to(kGpu));
  task->model().train();
  auto step = [&](std::span<const Tensor> b) { return examples::train_step(*task, *opt, b); };
  jit::Function f = jit::trace_tensors(step, batch, "train_step");  // traces and fuses; runs nothing
  ir::Graph g = f.graph();
  int groups = 0, big = 0;
  int64_t fewest = std::numeric_limits<int64_t>::max();  // blocks, among the kernels of a million elements or more
  for (const ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Fused) continue;
    ++groups;
    std::vector<std::string> results;
    for (uint32_t v : n.results) results.push_back(g.type(v).str());
    std::vector<codegen::CudaLaunch> launches = cuda::plan_group_launches(n, kSms);
    for (size_t k = 0; k < launches.size(); ++k) {
      const codegen::CudaLaunch& l = launches[k];
      if (l.rows * l.cols < codegen::kFillWork) continue;
      ++big;
      fewest = std::min(fewest, l.blocks);
      EXPECT_GE(l.blocks, 2 * kSms) << fmt::format(
          "group of {} ops -> {}, kernel {} of {}: {} rows x {} columns, {} parts, {} blocks of {}",
          n.body->nodes.size(), fmt::join(results, ", "), k + 1, launches.size(), l.rows, l.cols, l.parts, l.blocks,
          l.rows_by == codegen::CudaRows::Block ? "a block per row" : "a thread per row");
    }
  }
  EXPECT_GT(big, 0) << name << ": " << groups << " groups, none of a million elements";
  std::cout << name << ": " << groups << " fused groups, " << big << " kernels of a million elements or more, the "
            << "fewest blocks among them " << fewest << " (264 for 2 per multiprocessor)" << std::endl;
  // What the step should cost on an H200 (jit/cost.h): the README's table of the eight models.
  jit::PlanCost cost = jit::plan_cost(g, kSms);
  const jit::DevicePeak& h200 = jit::device_peak("H200");
  // Alike elementwise groups share launches (the optimizer's update of each parameter): those
  // that joined another's launch count none.
  int64_t joined = 0;
  for (const jit::KernelCost& k : cost.kernels) joined += k.launches == 0 && k.name.starts_with("fused");
  EXPECT_GE(cost.launches() + joined, groups);
  EXPECT_GT(cost.flops(), 0);
  std::cout << fmt::format(
                   "{} cost: {:.2f} GB, {:.1f} GFLOP, {} launches ({} groups joined an alike one's); H200 bound "
                   "{:.2f} ms ({:.2f} ms with TF32)",
                   name, static_cast<double>(cost.bytes()) / 1e9, cost.flops() / 1e9, cost.launches(), joined,
                   cost.bound(h200) * 1e3, cost.bound(h200, /*tf32=*/true) * 1e3)
            << std::endl;
  // What an eager step (PyTorch's) must move: its activations kept for the backward, and the
  // parameters, gradients and state the optimizer reads and writes.
  jit::EagerFloor eager = f.eager_floor();
  EXPECT_GT(eager.activations, 0);
  EXPECT_GT(eager.parameters, 0);
  std::cout << fmt::format(
                   "{} eager floor: {:.2f} GB (activations {:.2f} GB, kept operands {:.2f}, parameters {:.2f}, "
                   "state {:.2f}, inputs {:.2f}), {:.1f} GFLOP; H200 bound {:.2f} ms ({:.2f} ms with TF32)",
                   name, static_cast<double>(eager.bytes()) / 1e9, static_cast<double>(eager.activations) / 1e9,
                   static_cast<double>(eager.reread) / 1e9, static_cast<double>(eager.parameters) / 1e9,
                   static_cast<double>(eager.state) / 1e9, static_cast<double>(eager.inputs) / 1e9, eager.flops() / 1e9,
                   eager.bound(h200) * 1e3, eager.bound(h200, true) * 1e3)
            << std::endl;
}

INSTANTIATE_TEST_SUITE_P(FullSize, ModelLaunch, ::testing::ValuesIn(examples::model_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
