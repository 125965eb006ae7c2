// benchmarks/torch_step_bench.cpp -- step_bench.cpp's transformer block step in LibTorch eager
// (the MLP step is in torch_bench.cpp, the digits step in torch_train_bench.cpp).
#include <benchmark/benchmark.h>
// IValue first: LibTorch 1.13's headers use std::vector<IValue> while IValue is incomplete,
// which clang in C++20 mode rejects (it instantiates vector's constexpr members at once).
#include <ATen/core/ivalue.h>
#include <torch/torch.h>

#include <kiln/kiln.h>

#include <cmath>

#include "benchmarks/bench_cases.h"
#include "benchmarks/torch_threads.h"

namespace bench = kiln::bench;

namespace {

// bench::EncoderBlock in LibTorch.
struct EncoderBlock : torch::nn::Module {
  using E = bench::EncoderBlock;
  torch::nn::Embedding embed{E::kVocab, E::kDim};
  torch::nn::LayerNorm ln1{torch::nn::LayerNormOptions({E::kDim})}, ln2{torch::nn::LayerNormOptions({E::kDim})},
      ln_f{torch::nn::LayerNormOptions({E::kDim})};
  torch::nn::Linear qkv{E::kDim, 3 * E::kDim}, proj{E::kDim, E::kDim}, fc1{E::kDim, E::kHidden},
      fc2{E::kHidden, E::kDim}, head{E::kDim, E::kVocab};
  EncoderBlock() {
    register_module("embed", embed);
    register_module("ln1", ln1);
    register_module("qkv", qkv);
    register_module("proj", proj);
    register_module("ln2", ln2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("ln_f", ln_f);
    register_module("head", head);
  }
  torch::Tensor dropout(const torch::Tensor& x) { return torch::dropout(x, E::kDropout, is_training()); }
  torch::Tensor attention(const torch::Tensor& x) {
    int64_t b = x.size(0), t = x.size(1), dh = E::kDim / E::kHeads;
    auto q = qkv(x);
    auto heads = [&](int64_t i) {
      return q.narrow(-1, i * E::kDim, E::kDim).reshape({b, t, E::kHeads, dh}).permute({0, 2, 1, 3});
    };
    auto scores = torch::matmul(heads(0), heads(1).transpose(-2, -1)) * (1.0 / std::sqrt(double(dh)));
    auto a = dropout(torch::softmax(scores, -1));
    return proj(torch::matmul(a, heads(2)).permute({0, 2, 1, 3}).reshape({b, t, E::kDim}));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = embed(tokens);
    x = x + dropout(attention(ln1(x)));
    x = x + dropout(fc2(torch::gelu(fc1(ln2(x)))));
    return head(ln_f(x));
  }
};

void encoder_step(benchmark::State& s) {
  using E = bench::EncoderBlock;
  bench::SameThreads threads;
  torch::manual_seed(0);
  EncoderBlock net;
  torch::optim::AdamW opt(net.parameters(), torch::optim::AdamWOptions(1e-3));
  auto tokens = torch::randint(0, E::kVocab, {E::kBatch, E::kSeq}, torch::kLong);
  auto next = torch::randint(0, E::kVocab, {E::kBatch * E::kSeq}, torch::kLong);
  auto step = [&] {
    opt.zero_grad();
    auto loss =
        torch::nn::functional::cross_entropy(net.forward(tokens).reshape({E::kBatch * E::kSeq, E::kVocab}), next);
    loss.backward();
    opt.step();
    return loss;
  };
  benchmark::DoNotOptimize(step());
  for (auto _ : s) benchmark::DoNotOptimize(step());
}

[[maybe_unused]] const bool torch_steps_registered = [] {
  benchmark::RegisterBenchmark((bench::kEncoderName + "/torch").c_str(), encoder_step)->UseRealTime()->MinTime(1.0);
  return true;
}();

}  // namespace
