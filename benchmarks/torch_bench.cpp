// benchmarks/torch_bench.cpp -- the same cases as eager_bench.cpp, through LibTorch (built
// only when Debian's libtorch-dev is installed), on the same number of threads.
#include <benchmark/benchmark.h>
// IValue first: LibTorch 1.13's headers use std::vector<IValue> while IValue is incomplete,
// which clang in C++20 mode rejects (it instantiates vector's constexpr members at once).
#include <ATen/core/ivalue.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <kiln/kiln.h>

#include "benchmarks/bench_cases.h"
#include "benchmarks/torch_threads.h"

namespace {

constexpr int64_t k16M = 16 << 20;

}  // namespace

namespace {

using kiln::bench::SameThreads;

void BM_TorchAddTiny(benchmark::State& s) {
  SameThreads threads;
  torch::NoGradGuard g;
  auto a = torch::randn({s.range(0)}), b = torch::randn({s.range(0)});
  benchmark::DoNotOptimize(a + b);  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_TorchAddTiny)->Name("add_tiny[1]/torch")->Arg(1);
BENCHMARK(BM_TorchAddTiny)->Name("add_tiny[64]/torch")->Arg(64);

void BM_TorchMulScalarTiny(benchmark::State& s) {
  SameThreads threads;
  torch::NoGradGuard g;
  auto a = torch::randn({s.range(0)});
  benchmark::DoNotOptimize(a * 0.5f);  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(a * 0.5f);
}
BENCHMARK(BM_TorchMulScalarTiny)->Name("mul_scalar_tiny[1]/torch")->Arg(1);
BENCHMARK(BM_TorchMulScalarTiny)->Name("mul_scalar_tiny[64]/torch")->Arg(64);

void BM_TorchAdd16M(benchmark::State& s) {
  SameThreads threads;
  auto a = torch::randn({k16M}), b = torch::randn({k16M});
  benchmark::DoNotOptimize(a + b);  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(a + b);
  s.SetBytesProcessed(s.iterations() * k16M * 4 * 3);
}
BENCHMARK(BM_TorchAdd16M)->Name("add_16M/torch")->UseRealTime();

void BM_TorchTanh16M(benchmark::State& s) {
  SameThreads threads;
  auto a = torch::randn({k16M});
  benchmark::DoNotOptimize(torch::tanh(a));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(torch::tanh(a));
  s.SetBytesProcessed(s.iterations() * k16M * 4 * 2);
}
BENCHMARK(BM_TorchTanh16M)->Name("tanh_16M/torch")->UseRealTime();

torch::Tensor torch_gelu_9ops(const torch::Tensor& x) {
  auto cube = x * x * x;
  auto inner = (x + cube * 0.044715f) * 0.7978845608f;
  return x * 0.5f * (torch::tanh(inner) + 1.0f);
}
torch::Tensor torch_softmax_prims(const torch::Tensor& x) {
  auto e = torch::exp(x - std::get<0>(x.max(-1, true)));
  return e / e.sum(-1, true);
}
torch::Tensor torch_layer_norm_prims(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto d = x - x.mean(-1, true);
  auto var = (d * d).mean(-1, true);
  return d * torch::rsqrt(var + 1e-5f) * w + b;
}
template <class F> void torch_loop(benchmark::State& s, F fn, int64_t bytes) {
  SameThreads threads;
  torch::NoGradGuard g;
  benchmark::DoNotOptimize(fn());  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(fn());
  s.SetBytesProcessed(s.iterations() * bytes);
}

void BM_TorchGelu9(benchmark::State& s) {
  auto x = torch::randn({s.range(0)});
  torch_loop(
      s, [&] { return torch_gelu_9ops(x); }, s.range(0) * 8);
}
void BM_TorchGeluKernel(benchmark::State& s) {  // LibTorch's own single kernel
  auto x = torch::randn({s.range(0)});
  torch_loop(
      s, [&] { return torch::gelu(x, "tanh"); }, s.range(0) * 8);
}
BENCHMARK(BM_TorchGelu9)->Name("gelu_9ops_1M/torch")->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_TorchGeluKernel)->Name("gelu_9ops_1M/torch_op")->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_TorchGelu9)->Name("gelu_9ops_16M/torch")->Arg(k16M)->UseRealTime();
BENCHMARK(BM_TorchGeluKernel)->Name("gelu_9ops_16M/torch_op")->Arg(k16M)->UseRealTime();

void BM_TorchMatmul(benchmark::State& s) {
  SameThreads threads;
  auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  benchmark::DoNotOptimize(torch::matmul(a, b));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(torch::matmul(a, b));
  kiln::bench::count_flops(s, 2.0 * 1024 * 1024 * 1024);
}
BENCHMARK(BM_TorchMatmul)->Name("matmul_1024/torch")->UseRealTime();

constexpr int64_t kRowBytes = 4096 * 1024 * 4 * 2;
void BM_TorchSoftmax(benchmark::State& s, bool own_kernel) {
  auto a = torch::randn({4096, 1024});
  torch_loop(
      s, [&] { return own_kernel ? torch::softmax(a, -1) : torch_softmax_prims(a); }, kRowBytes);
}
BENCHMARK_CAPTURE(BM_TorchSoftmax, prims, false)->Name("softmax_4096x1024/torch")->UseRealTime();
BENCHMARK_CAPTURE(BM_TorchSoftmax, op, true)->Name("softmax_4096x1024/torch_op")->UseRealTime();

void BM_TorchLayerNorm(benchmark::State& s, bool own_kernel) {
  auto a = torch::randn({4096, 1024}), w = torch::randn({1024}), b = torch::randn({1024});
  torch_loop(
      s, [&] { return own_kernel ? torch::layer_norm(a, {1024}, w, b) : torch_layer_norm_prims(a, w, b); }, kRowBytes);
}
BENCHMARK_CAPTURE(BM_TorchLayerNorm, prims, false)->Name("layer_norm_4096x1024/torch")->UseRealTime();
BENCHMARK_CAPTURE(BM_TorchLayerNorm, op, true)->Name("layer_norm_4096x1024/torch_op")->UseRealTime();

void BM_TorchMlpForward(benchmark::State& s) {
  torch::nn::Linear fc1(784, 512), fc2(512, 10);
  auto x = torch::randn({s.range(0), 784});
  torch_loop(
      s, [&] { return torch_softmax_prims(fc2(torch_gelu_9ops(fc1(x)))); }, 0);
}
BENCHMARK(BM_TorchMlpForward)->Name("mlp_forward[256]/torch")->Arg(256)->UseRealTime();

// The fixed cost of a call: two ops eagerly, and as a TorchScript function (LibTorch's
// compiled call; tracing itself is Python-only).
void BM_TorchTwoOps(benchmark::State& s) {
  auto x = torch::randn({1});
  torch_loop(
      s, [&] { return x * 2.0f + 1.0f; }, 0);
}
void BM_TorchScriptCall(benchmark::State& s) {
  auto cu = torch::jit::compile("def f(x):\n    return x * 2.0 + 1.0\n");
  auto x = torch::randn({1});
  std::vector<c10::IValue> args{x};
  torch_loop(
      s, [&] { return cu->run_method("f", x); }, 0);
}
BENCHMARK(BM_TorchTwoOps)->Name("call_cached[1]/torch");
BENCHMARK(BM_TorchScriptCall)->Name("call_cached[1]/torch_op");

}  // namespace

namespace {

void BM_TorchAddTinyGrad(benchmark::State& s) {
  SameThreads threads;
  auto a = torch::randn({s.range(0)}, torch::requires_grad()), b = torch::randn({s.range(0)}, torch::requires_grad());
  benchmark::DoNotOptimize(a + b);
  for (auto _ : s) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_TorchAddTinyGrad)->Name("add_tiny_taped[1]/torch")->Arg(1);
BENCHMARK(BM_TorchAddTinyGrad)->Name("add_tiny_taped[64]/torch")->Arg(64);

void BM_TorchMlpStep(benchmark::State& s) {
  SameThreads threads;
  int64_t batch = s.range(0);
  torch::nn::Linear fc1(784, 256), fc2(256, 10);
  std::vector<torch::Tensor> params = fc1->parameters();
  for (auto& p : fc2->parameters()) params.push_back(p);
  torch::optim::SGD opt(params, 0.01);
  auto x = torch::randn({batch, 784});
  auto y = torch::randint(0, 10, {batch});
  auto step = [&] {
    auto loss = torch::nn::functional::cross_entropy(fc2(torch::relu(fc1(x))), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  step();
  for (auto _ : s) step();
}
BENCHMARK(BM_TorchMlpStep)->Name("mlp_train_step[64]/torch")->Arg(64)->UseRealTime();
BENCHMARK(BM_TorchMlpStep)->Name("mlp_train_step[256]/torch")->Arg(256)->UseRealTime();

}  // namespace
