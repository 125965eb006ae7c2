// tests/cuda/optimizer_test.cpp -- the optimizers' steps on CUDA, which trace their update on the
// first step and replay it (nn/optimizer.h run_step): every optimizer and its options against
// the CPU's fused pass, with the learning rate changed between steps and a gradient dropped.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// A step's update is one kernel per parameter: the host's numbers (the step size, the bias
// corrections) go up once per step and the update's ops fuse around them (each op was a
// launch of its own while they stayed CPU operands: eight a parameter for Adam).
TEST(CudaOptimizers, AnAdamWStepIsOneKernelAParameter) {
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
  EXPECT_EQ(cuda::kernel_launches() - before, static_cast<int64_t>(params.size()) + 5)
      << "one update kernel a parameter, and the five gradients' randn";
  jit::set_cuda_graphs_enabled(graphs);
}

}  // namespace
}  // namespace kiln
