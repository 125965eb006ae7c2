// benchmarks/torch_models_bench.cpp -- models_bench.cpp's training steps through LibTorch: the
// same models (tests/torch/torch_models.h), sizes, batches and optimizers, kiln's weights
// copied in (built only when libtorch-dev is installed). The FLOP count is kiln's for the same
// step, so the two rates compare directly.
#include <benchmark/benchmark.h>
// IValue first: LibTorch 1.13's headers use std::vector<IValue> while IValue is incomplete,
// which clang in C++20 mode rejects (it instantiates vector's constexpr members at once).
#include <ATen/core/ivalue.h>
#include <torch/torch.h>

#include <kiln/kiln.h>

#include <functional>
#include <string>

#include "benchmarks/bench_cases.h"
#include "benchmarks/torch_threads.h"
#include "examples/models/zoo.h"
#include "tests/torch/torch_models.h"

namespace bench = kiln::bench;
namespace ex = kiln::examples;
namespace tmod = kiln::torch_models;

namespace {

torch::Tensor to_torch(const kiln::Tensor& t) {
  kiln::Tensor c = t.contiguous();
  std::vector<int64_t> shape(c.shape().begin(), c.shape().end());
  torch::Tensor d = torch::tensor(c.to_vector<double>(), torch::kDouble).reshape(shape);
  return t.dtype() == kiln::DType::I64 ? d.to(torch::kLong) : d.to(torch::kFloat);
}

// The LibTorch model for `name` at the bench size, its loss on a batch, and its optimizer
// (the one zoo.h gives kiln's, with the same hyperparameters).
struct TorchModel {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> loss;
};

TorchModel torch_model(const std::string& name, ex::Task& task) {
  namespace F = torch::nn::functional;
  auto classify = [](auto m) {
    return TorchModel{m, [m](const std::vector<torch::Tensor>& b) { return F::cross_entropy(m->forward(b[0]), b[1]); }};
  };
  // The bench sizes of zoo.h, read back from kiln's model where a constructor needs them.
  if (name == "alexnet") return classify(std::make_shared<tmod::TAlexNet>(100, 4));
  if (name == "vgg19_bn") return classify(std::make_shared<tmod::TVGG19BN>(100, 4));
  if (name == "resnet50") return classify(std::make_shared<tmod::TResNet50>(100, 1));
  if (name == "mobilenet_v2") return classify(std::make_shared<tmod::TMobileNetV2>(100, 1));
  if (name == "unet") return classify(std::make_shared<tmod::TUNet>(2, 16, 3));
  if (name == "ncf") {
    auto m = std::make_shared<tmod::TNCF>(6040, 3706);
    return {m, [m](const std::vector<torch::Tensor>& b) {
              return F::binary_cross_entropy_with_logits(m->forward(b[0], b[1]), b[2]);
            }};
  }
  if (name == "gnmt") {
    auto m = std::make_shared<tmod::TGNMT>(1000, 256, 2);
    return {m, [m](const std::vector<torch::Tensor>& b) {
              return F::cross_entropy(m->forward(b[0], b[1]).reshape({-1, 1000}), b[2].reshape({-1}));
            }};
  }
  auto& gpt = dynamic_cast<ex::GPTTask&>(task);
  auto m = std::make_shared<tmod::TGPT>(gpt.net.config);
  int64_t vocab = gpt.net.config.vocab;
  return {m, [m, vocab](const std::vector<torch::Tensor>& b) {
            return F::cross_entropy(m->forward(b[0]).reshape({-1, vocab}), b[1].reshape({-1}));
          }};
}

std::unique_ptr<torch::optim::Optimizer> torch_optimizer(const std::string& name, torch::nn::Module& m) {
  if (name == "ncf" || name == "gnmt")
    return std::make_unique<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(1e-3));
  if (name == "gpt")
    return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.1));
  return std::make_unique<torch::optim::SGD>(m.parameters(),
                                             torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
}

void model_step(benchmark::State& s, const std::string& name) {
  bench::SameThreads threads;
  kiln::manual_seed(0);
  std::unique_ptr<ex::Task> task = ex::make_task(name, ex::Size::Bench);
  std::vector<kiln::Tensor> batch = task->batch(0);
  TorchModel t = torch_model(name, *task);
  {
    torch::NoGradGuard no_grad;
    auto params = t.module->named_parameters(), buffers = t.module->named_buffers();
    for (auto& [key, v] : task->model().state_dict()) {
      torch::Tensor* dst = params.find(key) ? params.find(key) : buffers.find(key);
      if (dst) dst->copy_(to_torch(v).to(dst->dtype()));
    }
  }
  std::vector<torch::Tensor> tb;
  for (const kiln::Tensor& x : batch) tb.push_back(to_torch(x));
  std::unique_ptr<torch::optim::Optimizer> opt = torch_optimizer(name, *t.module);
  auto step = [&] {
    opt->zero_grad();
    torch::Tensor loss = t.loss(tb);
    loss.backward();
    opt->step();
    return loss;
  };
  // The FLOPs of kiln's traced step on the same batch (the same math).
  std::unique_ptr<kiln::optim::Optimizer> kopt = ex::make_optimizer(name, *task);
  kiln::jit::Function traced = kiln::jit::trace_tensors(
      [&](std::span<const kiln::Tensor> b) { return ex::train_step(*task, *kopt, b); }, batch, name + "_step");
  traced.call(batch);
  double flops = bench::gemm_conv_flops(traced.graph());
  benchmark::DoNotOptimize(step());
  for (auto _ : s) benchmark::DoNotOptimize(step());
  bench::count_flops(s, flops);
}

[[maybe_unused]] const bool torch_models_registered = [] {
  for (const std::string& name : ex::model_names())
    benchmark::RegisterBenchmark((bench::model_case(name) + "/torch").c_str(),
                                 [name](benchmark::State& s) { model_step(s, name); })
        ->UseRealTime()
        ->MinTime(0.5);
  return true;
}();

}  // namespace
