// benchmarks/train_bench.cpp -- the kernels a training step spends its time in, eagerly: a
// linear layer's three GEMMs, 3x3 convolutions forward and backward, max pooling, embedding's
// backward, a full sum beside a read-only copy loop, and two whole training steps
// (torch_train_bench.cpp: the same through LibTorch; bench_cases.h: shapes and counts).
#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

#include <string>

#include "benchmarks/bench_cases.h"
#include "benchmarks/copy_limit.h"

using namespace kiln;

namespace {

// Times fn after one untimed call (first-touch page faults and the allocator's cache fill
// stay out of the timing).
template <class F> void timed(benchmark::State& s, F fn) {
  benchmark::DoNotOptimize(fn());
  for (auto _ : s) benchmark::DoNotOptimize(fn());
}

// The gradients of y (given its upstream gradient g) with respect to `wrt`: the backward alone,
// on a graph recorded once and retained.
std::vector<Tensor> grads(const Tensor& y, const std::vector<Tensor>& wrt, const Tensor& g) {
  std::vector<Tensor> outs{y}, gs{g};
  return autograd::grad(outs, wrt, gs, /*retain_graph=*/true);
}

// ---- a linear layer's GEMMs: [16,128,256] @ [256,1024] ------------------------------------

void matmul_case(benchmark::State& s, int which) {  // 0: forward, 1: d input, 2: d weight
  Tensor x = randn({bench::kMmBatch, bench::kMmRows, bench::kMmIn});
  Tensor w = randn({bench::kMmIn, bench::kMmOut});
  if (which == 0) {
    NoGradGuard no_grad;
    timed(s, [&] { return matmul(x, w); });
  } else {
    Tensor& wrt = which == 1 ? x : w;
    wrt.requires_grad_();
    Tensor y = matmul(x, w), g = randn(y.shape());
    timed(s, [&] { return grads(y, {wrt}, g); });
  }
  bench::count_flops(s, bench::kMmFlops);
}

// ---- 3x3 convolutions, forward and backward (input and weight gradients) ------------------

void conv_case(benchmark::State& s, bench::ConvCase c, bool backward) {
  Tensor x = randn({c.n, c.c, c.hw, c.hw}), w = randn({c.c, c.c / c.groups(), 3, 3}) * 0.05f;
  auto conv = [&] { return conv2d(x, w, {}, {1, 1}, {1, 1}, {1, 1}, c.groups()); };
  if (!backward) {
    NoGradGuard no_grad;
    timed(s, conv);
  } else {
    x.requires_grad_();
    w.requires_grad_();
    Tensor y = conv(), g = randn(y.shape());
    timed(s, [&] { return grads(y, {x, w}, g); });
  }
  bench::count_flops(s, c.flops(backward));
}

// ---- max pooling on [32,64,56,56] ---------------------------------------------------------

void pool_case(benchmark::State& s, bench::PoolCase p, bool backward) {
  Tensor x = randn({p.n, p.c, p.hw, p.hw});
  auto pool = [&] { return max_pool2d(x, {p.k, p.k}, {p.stride, p.stride}, {p.pad, p.pad}); };
  if (!backward) {
    NoGradGuard no_grad;
    timed(s, pool);
  } else {
    x.requires_grad_();
    Tensor y = pool(), g = randn(y.shape());
    timed(s, [&] { return grads(y, {x}, g); });
  }
  bench::count_bytes(s, p.bytes());
}

// ---- embedding's backward: 4096 tokens into a [32000,256] table ---------------------------

void embedding_backward(benchmark::State& s) {
  Tensor w = randn({bench::kVocab, bench::kEmbedDim}).requires_grad_();
  Tensor idx = randint(0, bench::kVocab, {bench::kTokens});
  Tensor y = embedding(idx, w), g = randn(y.shape());
  timed(s, [&] { return grads(y, {w}, g); });
  bench::count_bytes(s, bench::kEmbedBytes);
}

// ---- a full sum of 16M floats, and a copy loop counting only what it reads ----------------

void sum_copy(benchmark::State& s) { bench::copy_case(s, bench::kSumN * 4, /*reads_only=*/true); }

void sum_16m(benchmark::State& s) {
  NoGradGuard no_grad;
  Tensor a = randn({bench::kSumN});
  timed(s, [&] { return a.sum(); });
  bench::count_bytes(s, bench::kSumN * 4.0);
}

// ---- training steps -----------------------------------------------------------------------

// Times training steps: the loss, zero_grad, backward, the optimizer's step.
template <class Loss> void train_steps(benchmark::State& s, optim::Optimizer& opt, Loss loss_of) {
  timed(s, [&] {
    Tensor loss = loss_of();
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  });
}

// examples/train_digits.cpp's step at batch 32: forward, cross-entropy, backward, Adam.
void digits_step(benchmark::State& s) {
  manual_seed(0);
  bench::DigitsNet net;
  optim::Adam opt(net.parameters(), 3e-3);
  Tensor x = rand({bench::kDigitsBatch, 1, 8, 8}), y = randint(0, 10, {bench::kDigitsBatch});
  train_steps(s, opt, [&] { return cross_entropy(net(x), y); });
  bench::count_flops(s, bench::digits_step_flops(bench::kDigitsBatch));
}

// A ResNet basic block's step at batch 8, 64 channels, 32x32: forward, MSE, backward, SGD.
void block_step(benchmark::State& s) {
  manual_seed(0);
  bench::BasicBlock block;
  optim::SGD opt(block.parameters(), 0.01);
  const bench::ConvCase& c = bench::kBlockConv;
  Tensor x = randn({c.n, c.c, c.hw, c.hw}), target = randn({c.n, c.c, c.hw, c.hw});
  train_steps(s, opt, [&] { return mse_loss(block(x), target); });
  bench::count_flops(s, bench::block_step_flops());
}

[[maybe_unused]] const bool registered = bench::register_train_cases(
    "kiln", {matmul_case, conv_case, pool_case, embedding_backward, sum_16m, digits_step, block_step, sum_copy});

}  // namespace
