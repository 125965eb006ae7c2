// benchmarks/torch_train_bench.cpp -- train_bench.cpp's cases through LibTorch's eager ops,
// with the same shapes, counts and timing (built only when libtorch-dev is installed).
#include <benchmark/benchmark.h>
// IValue first: LibTorch 1.13's headers use std::vector<IValue> while IValue is incomplete,
// which clang in C++20 mode rejects (it instantiates vector's constexpr members at once).
#include <ATen/core/ivalue.h>
#include <torch/torch.h>

#include <kiln/kiln.h>

#include <string>

#include "benchmarks/bench_cases.h"
#include "benchmarks/torch_threads.h"

namespace bench = kiln::bench;

namespace {

template <class F> void timed(benchmark::State& s, F fn) {
  benchmark::DoNotOptimize(fn());
  for (auto _ : s) benchmark::DoNotOptimize(fn());
}

std::vector<torch::Tensor> grads(const torch::Tensor& y, const std::vector<torch::Tensor>& wrt,
                                 const torch::Tensor& g) {
  return torch::autograd::grad({y}, wrt, {g}, /*retain_graph=*/true);
}

void torch_matmul_case(benchmark::State& s, int which) {  // 0: forward, 1: d input, 2: d weight
  bench::SameThreads threads;
  auto x = torch::randn({bench::kMmBatch, bench::kMmRows, bench::kMmIn});
  auto w = torch::randn({bench::kMmIn, bench::kMmOut});
  if (which == 0) {
    torch::NoGradGuard no_grad;
    timed(s, [&] { return torch::matmul(x, w); });
  } else {
    torch::Tensor& wrt = which == 1 ? x : w;
    wrt.requires_grad_();
    auto y = torch::matmul(x, w), g = torch::randn_like(y);
    timed(s, [&] { return grads(y, {wrt}, g); });
  }
  bench::count_flops(s, bench::kMmFlops);
}

void torch_conv_case(benchmark::State& s, bench::ConvCase c, bool backward) {
  bench::SameThreads threads;
  auto x = torch::randn({c.n, c.c, c.hw, c.hw}), w = torch::randn({c.c, c.c / c.groups(), 3, 3}) * 0.05f;
  auto conv = [&] { return torch::conv2d(x, w, {}, 1, 1, 1, c.groups()); };
  if (!backward) {
    torch::NoGradGuard no_grad;
    timed(s, conv);
  } else {
    x.requires_grad_();
    w.requires_grad_();
    auto y = conv(), g = torch::randn_like(y);
    timed(s, [&] { return grads(y, {x, w}, g); });
  }
  bench::count_flops(s, c.flops(backward));
}

void torch_pool_case(benchmark::State& s, bench::PoolCase p, bool backward) {
  bench::SameThreads threads;
  auto x = torch::randn({p.n, p.c, p.hw, p.hw});
  auto pool = [&] { return torch::max_pool2d(x, {p.k, p.k}, {p.stride, p.stride}, {p.pad, p.pad}); };
  if (!backward) {
    torch::NoGradGuard no_grad;
    timed(s, pool);
  } else {
    x.requires_grad_();
    auto y = pool(), g = torch::randn_like(y);
    timed(s, [&] { return grads(y, {x}, g); });
  }
  bench::count_bytes(s, p.bytes());
}

void torch_embedding_backward(benchmark::State& s) {
  bench::SameThreads threads;
  auto w = torch::randn({bench::kVocab, bench::kEmbedDim}, torch::requires_grad());
  auto idx = torch::randint(0, bench::kVocab, {bench::kTokens}, torch::kLong);
  auto y = torch::embedding(w, idx), g = torch::randn_like(y);
  timed(s, [&] { return grads(y, {w}, g); });
  bench::count_bytes(s, bench::kEmbedBytes);
}

void torch_sum_16m(benchmark::State& s) {
  bench::SameThreads threads;
  torch::NoGradGuard no_grad;
  auto a = torch::randn({bench::kSumN});
  timed(s, [&] { return a.sum(); });
  bench::count_bytes(s, bench::kSumN * 4.0);
}

// bench::DigitsNet in LibTorch.
struct DigitsNet : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 16, 3).padding(1)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(16, 32, 3).padding(1)};
  torch::nn::Linear fc{32 * 2 * 2, 10};
  DigitsNet() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc", fc);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(conv1(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2(h)), 2);
    return fc(h.flatten(1));
  }
};

void torch_digits_step(benchmark::State& s) {
  bench::SameThreads threads;
  torch::manual_seed(0);
  DigitsNet net;
  torch::optim::Adam opt(net.parameters(), torch::optim::AdamOptions(3e-3));
  auto x = torch::rand({bench::kDigitsBatch, 1, 8, 8});
  auto y = torch::randint(0, 10, {bench::kDigitsBatch}, torch::kLong);
  auto step = [&] {
    auto loss = torch::nn::functional::cross_entropy(net.forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  timed(s, step);
  bench::count_flops(s, bench::digits_step_flops(bench::kDigitsBatch));
}

// bench::BasicBlock in LibTorch.
struct BasicBlock : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(64, 64, 3).padding(1).bias(false)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(64, 64, 3).padding(1).bias(false)};
  BasicBlock() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(conv2(torch::relu(conv1(x))) + x); }
};

void torch_block_step(benchmark::State& s) {
  bench::SameThreads threads;
  torch::manual_seed(0);
  BasicBlock block;
  torch::optim::SGD opt(block.parameters(), torch::optim::SGDOptions(0.01));
  const bench::ConvCase& c = bench::kBlockConv;
  auto x = torch::randn({c.n, c.c, c.hw, c.hw}), target = torch::randn({c.n, c.c, c.hw, c.hw});
  auto step = [&] {
    auto loss = torch::mse_loss(block.forward(x), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  timed(s, step);
  bench::count_flops(s, bench::block_step_flops());
}

[[maybe_unused]] const bool torch_train_registered =
    bench::register_train_cases("torch", {torch_matmul_case, torch_conv_case, torch_pool_case, torch_embedding_backward,
                                          torch_sum_16m, torch_digits_step, torch_block_step});

}  // namespace
