// tests/cuda/optimizer_test.cpp -- the optimizers' steps on CUDA, which trace their update on the
// first step and replay it (nn/optimizer.h run_step): every optimizer and its options against
// the CPU's fused pass, with the learning rate changed between steps and a gradient dropped.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "examples/models/train.h"
#include "examples/models/zoo.h"
#include "tests/cuda/cuda_test.h"
#include "tests/ops/reference.h"

namespace kiln {
namespace {

using test::kGpu;

struct Maker {
  std::string name;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
};

TEST(CudaOptimizers, StepsMatchTheCpu) {
  REQUIRE_CUDA();
  const Maker makers[] = {
      {"sgd", [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.1); }},
      {"sgd_nesterov",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(
             p, 0.1, optim::SgdOptions{.momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
      {"adam",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(p, 1e-2, optim::AdamOptions{.weight_decay = 0.1});
       }},
      {"adamw", [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, 1e-2); }},
      {"rmsprop_centered",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::RMSprop>(p, 1e-2, optim::RmspropOptions{.momentum = 0.5, .centered = true});
       }},
      {"adagrad",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adagrad>(p, 1e-1, optim::AdagradOptions{.lr_decay = 0.1});
       }},
  };
  for (const Maker& m : makers) {
    SCOPED_TRACE(m.name);
    manual_seed(9);
    std::vector<Tensor> cpu_p = {randn({7, 3}).requires_grad_(), randn({5}).requires_grad_()};
    std::vector<Tensor> gpu_p;
    for (const Tensor& p : cpu_p) gpu_p.push_back(p.detach().to(kGpu).requires_grad_());
    auto cpu_opt = m.make(cpu_p), gpu_opt = m.make(gpu_p);
    for (int step = 0; step < 4; ++step) {
      if (step == 2) cpu_opt->set_lr(cpu_opt->lr() / 2), gpu_opt->set_lr(gpu_opt->lr() / 2);
      std::vector<Tensor> given;
      for (size_t i = 0; i < cpu_p.size(); ++i) {
        Tensor g = randn(cpu_p[i].shape());
        given.push_back(g);
        bool dropped = step == 3 && i == 1;  // a parameter the step's loss did not reach
        cpu_p[i].set_grad(dropped ? Tensor() : g);
        gpu_p[i].set_grad(dropped ? Tensor() : g.to(kGpu));
      }
      cpu_opt->step();
      gpu_opt->step();
      for (size_t i = 0; i < cpu_p.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(step) + ", parameter " + std::to_string(i));
        EXPECT_TRUE(test::all_close(gpu_p[i].detach().to(cpu), cpu_p[i].detach().to_vector<double>(), cpu_p[i].shape(),
                                    {2e-5, 1e-6}));
        // The step leaves the gradients as they were given.
        if (cpu_p[i].grad().defined())
          EXPECT_TRUE(test::all_close(gpu_p[i].grad().to(cpu), given[i].to_vector<double>(), given[i].shape(), {0, 0}));
        else EXPECT_FALSE(gpu_p[i].grad().defined());
      }
    }
  }
}

// A step's update is one launch: each parameter's update is one fused kernel (the host's
// numbers, the step size and the bias corrections, go up once per step and the update's ops fuse
// around them), and the kernels of one text share a launch (a multi-tensor apply).
TEST(CudaOptimizers, AnAdamWStepIsOneLaunch) {
  REQUIRE_CUDA();
  const bool graphs = jit::cuda_graphs_enabled();
  jit::set_cuda_graphs_enabled(false);  // (a replay would launch them as one graph)
  manual_seed(4);
  std::vector<Tensor> params;
  for (const Dims& shape : std::vector<Dims>{{64, 32}, {32}, {10, 64}, {10}, {3, 3, 4, 4}})
    params.push_back(randn(shape).to(kGpu).requires_grad_());
  optim::AdamW opt(params, 1e-3, optim::AdamWOptions{.weight_decay = 0.1});
  auto step = [&] {
    for (Tensor& p : params) p.set_grad(randn(p.shape()).to(kGpu));
    opt.step();
  };
  step();  // traces and compiles the update
  step();
  const int64_t before = cuda::kernel_launches();
  step();
  EXPECT_EQ(cuda::kernel_launches() - before, 1) << "one update launch";
  jit::set_cuda_graphs_enabled(graphs);
}

// More parameters than one launch's arguments hold (about 140 Adam updates), of every size
// (empty, one element, past a block's grid-stride turn), in batches of several launches: the
// same numbers as the CPU's, with and without the step's CUDA graph.
TEST(CudaOptimizers, ManyParametersUpdateInBatchesAsTheCpuDoes) {
  REQUIRE_CUDA();
  const bool graphs = jit::cuda_graphs_enabled();
  for (bool with_graphs : {false, true}) {
    SCOPED_TRACE(with_graphs ? "replayed" : "launched");
    jit::set_cuda_graphs_enabled(with_graphs);
    manual_seed(8);
    std::vector<Tensor> cpu_p, gpu_p;
    for (int i = 0; i < 300; ++i) {
      Dims shape = i % 7 == 0 ? Dims{0} : i % 5 == 0 ? Dims{1} : i == 11 ? Dims{70000} : Dims{i % 13 + 1, 3};
      cpu_p.push_back(randn(shape).requires_grad_());
      gpu_p.push_back(cpu_p.back().detach().to(kGpu).requires_grad_());
    }
    optim::AdamW cpu_opt(cpu_p, 1e-2, optim::AdamWOptions{.weight_decay = 0.1});
    optim::AdamW gpu_opt(gpu_p, 1e-2, optim::AdamWOptions{.weight_decay = 0.1});
    int64_t launches = 0;
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < cpu_p.size(); ++i) {
        Tensor g = randn(cpu_p[i].shape());
        cpu_p[i].set_grad(g);
        gpu_p[i].set_grad(g.to(kGpu));
      }
      const int64_t before = cuda::kernel_launches();
      cpu_opt.step();
      gpu_opt.step();
      launches = cuda::kernel_launches() - before;
      for (size_t i = 0; i < cpu_p.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(step) + ", parameter " + std::to_string(i));
        ASSERT_TRUE(test::all_close(gpu_p[i].detach().to(cpu), cpu_p[i].detach().to_vector<double>(), cpu_p[i].shape(),
                                    {2e-5, 1e-6}));
      }
    }
    if (!with_graphs) {
      EXPECT_EQ(launches, 3) << "257 non-empty updates in launches of at most 143";
    }
  }
  jit::set_cuda_graphs_enabled(graphs);
}

// An optimizer that updates nothing: a traced step with it launches what the step itself does.
struct NoUpdate final : optim::Optimizer {
  using Optimizer::Optimizer;
  void step() override {}
};

// The launches an AdamW step adds to a model's training step, eagerly (its own traced update)
// and inside a traced step: at most 4 (PyTorch's fused AdamW launches a few), for ResNet-50's
// 161 parameters and a 12-layer GPT's 148 (widths cut down: the launches do not depend on them).
TEST(CudaOptimizers, AModelsAdamWStepIsAtMostFourLaunches) {
  REQUIRE_CUDA();
  const bool graphs = jit::cuda_graphs_enabled();
  jit::set_cuda_graphs_enabled(false);
  for (const std::string model : {"resnet50", "gpt"}) {
    SCOPED_TRACE(model);
    manual_seed(5);
    std::unique_ptr<examples::Task> task =
        model == "gpt" ? std::make_unique<examples::GPTTask>(
                             examples::GPTConfig{.vocab = 64, .context = 8, .embed = 16, .heads = 2, .layers = 12}, 2)
                       : examples::make_task(model, examples::Size::Tiny, 2);
    task->model().to(kGpu);
    task->model().train();
    std::vector<Tensor> params = task->model().parameters();
    EXPECT_EQ(params.size(), model == "gpt" ? 148u : 161u);
    optim::AdamW adamw(params, 1e-3, optim::AdamWOptions{.weight_decay = 0.1});
    NoUpdate none(params, 1e-3);
    std::vector<Tensor> batch = examples::batch_on(*task, 0, kGpu);
    // Eagerly: the update after an eager backward.
    for (int i = 0; i < 3; ++i) {
      examples::train_step(*task, none, batch);
      const int64_t before = cuda::kernel_launches();
      adamw.step();
      if (i == 2) {
        EXPECT_LE(cuda::kernel_launches() - before, 4) << "eager";
      }
    }
    // Traced: a whole step with AdamW, beside the same step updating nothing.
    auto launches_of = [&](optim::Optimizer& opt) {
      jit::Function step = jit::trace_tensors(
          [&](std::span<const Tensor> b) { return examples::train_step(*task, opt, b); }, batch, "step");
      step.call(batch);
      const int64_t before = cuda::kernel_launches();
      step.call(batch);
      return cuda::kernel_launches() - before;
    };
    const int64_t with = launches_of(adamw), without = launches_of(none);
    EXPECT_LE(with - without, 4) << "traced: " << with << " launches with AdamW, " << without << " without";
  }
  jit::set_cuda_graphs_enabled(graphs);
}

}  // namespace
}  // namespace kiln
