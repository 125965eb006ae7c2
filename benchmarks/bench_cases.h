// benchmarks/bench_cases.h -- the functions the benchmarks run, written once for kiln's eager
// and traced runs (torch_bench.cpp writes the same with LibTorch's ops).
#pragma once

#include <benchmark/benchmark.h>

#include <kiln/kiln.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>
#include "examples/digits_net.h"
#include "runtime/files.h"

namespace kiln::bench {

// gelu with the tanh approximation as 9 primitive ops (one pass over memory each, eagerly).
inline Tensor gelu_9ops(Tensor x) {
  Tensor cube = x * x * x;
  Tensor inner = (x + cube * 0.044715f) * 0.7978845608f;
  return x * 0.5f * (tanh(inner) + 1.0f);
}

// softmax over the last dim from primitive ops.
inline Tensor softmax_prims(Tensor x) {
  Tensor e = exp(x - amax(x, {-1}, true));
  return e / e.sum({-1}, true);
}

// layer_norm over the last dim from primitive ops (biased variance, eps 1e-5, as at::layer_norm).
inline Tensor layer_norm_prims(Tensor x, Tensor w, Tensor b) {
  Tensor d = x - x.mean({-1}, true);
  Tensor var = (d * d).mean({-1}, true);
  return d * rsqrt(var + 1e-5f) * w + b;
}

// The smallest function worth a kernel: two pointwise ops.
inline Tensor two_ops(Tensor x) { return x * 2.0f + 1.0f; }

// MLP forward: 784 -> 512, gelu (tanh), -> 10, softmax.
struct Mlp {
  nn::Linear fc1{784, 512}, fc2{512, 10};
  Tensor forward(const Tensor& x) { return softmax_prims(fc2(gelu_9ops(fc1(x)))); }
};

int first_call_probe();  // jit_bench.cpp

/// The first call of a function in a fresh process: this binary run again with `flag` (its
/// child side prints its own milliseconds), with the disk cache off, or warmed by a first
/// child. Timed manually, one child per iteration.
inline double child_first_call_ms(const std::string& flag, const std::string& cache_dir) {
  std::optional<std::string> out =
      files::run_program({fmt::format("/proc/{}/exe", ::getpid()), flag}, {"KILN_CACHE_DIR=" + cache_dir});
  return out && !out->empty() ? std::atof(out->c_str()) : -1;
}
inline void first_call_in_child(benchmark::State& s, bool warm, const std::string& flag) {
  std::string dir = (std::filesystem::temp_directory_path() / fmt::format("kiln-bench-cache-{}", ::getpid())).string();
  std::filesystem::remove_all(dir);
  if (warm) child_first_call_ms(flag, dir);  // fills the disk cache
  for (auto _ : s) {
    double ms = child_first_call_ms(flag, warm ? dir : "off");
    if (ms < 0) s.SkipWithError("the child process failed");
    s.SetIterationTime(ms / 1e3);
  }
  std::filesystem::remove_all(dir);
}

// ---- the kernels a training step spends its time in (train_bench.cpp, torch_train_bench.cpp):
// the same shapes and the same FLOP and byte counts for kiln and LibTorch -------------------

/// The label of a copy loop that counts only the bytes it reads (the table leaves it out of
/// "copy loop from memory", which counts reads and writes).
inline constexpr const char* kReadsOnly = "reads only";

inline void count_flops(benchmark::State& s, double per_iteration) {
  double flops = per_iteration * double(s.iterations());
  s.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
}
/// The example models' step cases (models_bench.cpp, torch_models_bench.cpp): "model_<name>".
inline std::string model_case(const std::string& name) { return "model_" + name; }

/// The FLOPs of a graph's tensor-core work (2 per multiply-add): its matmuls, addmm, convolutions
/// and their gradients, attention and RNNs, as the cost model counts them (jit/cost.h). What a
/// step could not do faster than matmul_1024's rate.
inline double gemm_conv_flops(const ir::Graph& g) {
  double total = 0;
  for (const jit::KernelCost& k : jit::plan_cost(g).kernels)
    if (k.unit == jit::MathUnit::TensorCores) total += k.flops;
  return total;
}

inline void count_bytes(benchmark::State& s, double per_iteration) {
  s.SetBytesProcessed(static_cast<int64_t>(per_iteration * double(s.iterations())));
}

// A linear layer's three GEMMs: x [16,128,256] @ w [256,1024] forward, then the gradients of
// x and of w; each is 2*M*K*N FLOPs with M = 16*128.
inline constexpr int64_t kMmBatch = 16, kMmRows = 128, kMmIn = 256, kMmOut = 1024;
inline constexpr double kMmFlops = 2.0 * kMmBatch * kMmRows * kMmIn * kMmOut;
inline const std::string kMmName = "matmul_16x128x256_256x1024";  // + _fwd, _dinput, _dweight

/// A 3x3 convolution, stride 1, padding 1, [n, c, hw, hw] to c channels: ResNet's body, or
/// depthwise (groups = c). Backward computes the input and the weight gradients.
struct ConvCase {
  int64_t n, c, hw;
  bool depthwise;
  int64_t groups() const { return depthwise ? c : 1; }
  /// e.g. conv3x3_64x56x56[32]_fwd, dwconv3x3_64x56x56[32]_bwd
  std::string name(bool backward) const {
    return (depthwise ? "dwconv3x3_" : "conv3x3_") + std::to_string(c) + "x" + std::to_string(hw) + "x" +
           std::to_string(hw) + "[" + std::to_string(n) + "]" + (backward ? "_bwd" : "_fwd");
  }
  /// 2*N*O*OH*OW*(C/groups)*kh*kw; the backward's two gradients cost as much each.
  double flops(bool backward) const {
    return (backward ? 2 : 1) * 2.0 * double(n * c * hw * hw) * double(c / groups()) * 9;
  }
};
inline std::vector<ConvCase> conv_cases() {
  return {{1, 64, 56, false}, {32, 64, 56, false}, {1, 128, 28, false}, {32, 128, 28, false}, {32, 64, 56, true}};
}

/// max_pool2d on [32,64,56,56]: 2x2 stride 2, and ResNet's stem pool 3x3 stride 2 padding 1
/// (both give 28x28). Bytes: the input read and the output written; backward, the output's
/// gradient read and the input's written.
struct PoolCase {
  int64_t k, stride, pad;
  static constexpr int64_t n = 32, c = 64, hw = 56;
  int64_t out_hw() const { return (hw + 2 * pad - k) / stride + 1; }
  std::string name(bool backward) const {
    return "max_pool" + std::to_string(k) + "x" + std::to_string(k) + "s" + std::to_string(stride) +
           (pad ? "p" + std::to_string(pad) : "") + "_32x64x56x56" + (backward ? "_bwd" : "_fwd");
  }
  double bytes() const { return 4.0 * double(n * c) * double(hw * hw + out_hw() * out_hw()); }
};
inline std::vector<PoolCase> pool_cases() { return {{2, 2, 0}, {3, 2, 1}}; }

// The backward of embedding: 4096 tokens' [4096,256] gradient summed into a dense [32000,256]
// table. Bytes: the upstream gradient read and the table written.
inline constexpr int64_t kVocab = 32000, kTokens = 4096, kEmbedDim = 256;
inline constexpr double kEmbedBytes = 4.0 * double(kTokens + kVocab) * double(kEmbedDim);
inline const std::string kEmbedName = "embedding_32000x256[4096]_bwd";

// A full sum of 16M floats: the bytes read.
inline constexpr int64_t kSumN = 16 << 20;
inline const std::string kSumName = "sum_16M";

/// The digits demo's model (examples/digits_net.h), trained with Adam(3e-3).
using examples::DigitsNet;
inline constexpr int64_t kDigitsBatch = 32;
inline const std::string kDigitsName = "digits_train_step[32]";
/// The step's conv and linear FLOPs: forward, then both gradients of each layer except conv1's
/// input gradient (the images need none).
inline double digits_step_flops(int64_t n) {
  double conv1 = 2.0 * double(n) * 16 * 8 * 8 * 1 * 9, conv2 = 2.0 * double(n) * 32 * 4 * 4 * 16 * 9;
  double fc = 2.0 * double(n) * 128 * 10;
  return 2 * conv1 + 3 * (conv2 + fc);
}

/// A ResNet-18 basic block without batch norm: relu(conv3x3(relu(conv3x3(x))) + x), 64
/// channels, no biases; trained to an MSE target with SGD(0.01) at batch 8 on 32x32.
struct BasicBlock : nn::Module {
  nn::Conv2d conv1{64, 64, {3, 3}, {.padding = {1, 1}, .bias = false}};
  nn::Conv2d conv2{64, 64, {3, 3}, {.padding = {1, 1}, .bias = false}};
  BasicBlock() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
  }
  Tensor operator()(const Tensor& x) { return relu(conv2(relu(conv1(x))) + x); }
};
inline constexpr ConvCase kBlockConv{8, 64, 32, false};
inline const std::string kBlockName = "resnet_block_train_step[8]";
/// The block's conv FLOPs per step: both forwards, both weight gradients, and conv2's input
/// gradient (the block's input needs none).
inline double block_step_flops() { return 5 * kBlockConv.flops(false); }

// ---- whole training steps four ways (step_bench.cpp, torch_step_bench.cpp): eager ("kiln"),
// compiled forward and backward ("jit_bwd": loss = fast(x, y); loss.backward(); opt.step()),
// the whole step traced ("jit": fast(x, y) also runs backward and the update), LibTorch eager.

/// MLP 784-256-10 with ReLU, cross-entropy, SGD(0.01).
inline std::string mlp_step_name(int64_t batch) { return "mlp_train_step[" + std::to_string(batch) + "]"; }
/// The step's GEMM FLOPs: both layers forward and their weight gradients, and fc2's input
/// gradient (the images need none).
inline double mlp_step_flops(int64_t n) {
  double fc1 = 2.0 * double(n) * 784 * 256, fc2 = 2.0 * double(n) * 256 * 10;
  return 2 * fc1 + 3 * fc2;
}

/// A pre-norm transformer encoder block with token embedding and a vocabulary head, trained on
/// next-token cross-entropy with AdamW(1e-3): vocab 256, d 256, 8 heads, MLP 1024 (gelu),
/// dropout 0.1 after attention's softmax and on both residual branches; batch 16, seq 128.
struct EncoderBlock : nn::Module {
  static constexpr int64_t kVocab = 256, kDim = 256, kHeads = 8, kHidden = 1024, kBatch = 16, kSeq = 128;
  static constexpr double kDropout = 0.1;
  nn::Embedding embed{kVocab, kDim};
  nn::LayerNorm ln1{{kDim}}, ln2{{kDim}}, ln_f{{kDim}};
  nn::Linear qkv{kDim, 3 * kDim}, proj{kDim, kDim}, fc1{kDim, kHidden}, fc2{kHidden, kDim}, head{kDim, kVocab};
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
  Tensor attention(const Tensor& x) {
    int64_t b = x.shape()[0], t = x.shape()[1], dh = kDim / kHeads;
    Tensor q = qkv(x);  // [b, t, 3d]
    auto heads = [&](int64_t i) {
      return q.narrow(-1, i * kDim, kDim).reshape({b, t, kHeads, dh}).permute({0, 2, 1, 3});
    };
    Tensor scores = matmul(heads(0), heads(1).transpose(-2, -1)) * (1.0 / std::sqrt(double(dh)));
    Tensor a = nn::dropout(softmax(scores, -1), kDropout, is_training());
    return proj(matmul(a, heads(2)).permute({0, 2, 1, 3}).reshape({b, t, kDim}));
  }
  /// Logits [batch, seq, vocab].
  Tensor operator()(const Tensor& tokens) {
    Tensor x = embed(tokens);
    x = x + nn::dropout(attention(ln1(x)), kDropout, is_training());
    x = x + nn::dropout(fc2(gelu(fc1(ln2(x)))), kDropout, is_training());
    return head(ln_f(x));
  }
};
inline const std::string kEncoderName = "transformer_block_train_step[16x128]";
/// The step's GEMM FLOPs: each linear's forward and both its gradients (the embedding output
/// requires grad, so qkv's input gradient is computed too), and attention's two batched
/// products forward with both gradients of each.
inline double encoder_step_flops() {
  using E = EncoderBlock;
  double n = double(E::kBatch * E::kSeq), d = E::kDim;
  double linears = 2 * n * d * (3 * d + d + 2 * E::kHidden + E::kVocab);
  double attention = 2 * 2.0 * E::kBatch * E::kSeq * E::kSeq * d;  // q@k^T and a@v over all heads
  return 3 * (linears + attention);
}

/// One implementation's training-kernel cases (train_bench.cpp for kiln, torch_train_bench.cpp
/// for LibTorch): the same cases under the same names, registered in one order.
struct TrainCases {
  void (*matmul)(benchmark::State&, int which);  // 0: forward, 1: d input, 2: d weight
  void (*conv)(benchmark::State&, ConvCase, bool backward);
  void (*pool)(benchmark::State&, PoolCase, bool backward);
  void (*embedding_backward)(benchmark::State&);
  void (*sum)(benchmark::State&);
  void (*digits_step)(benchmark::State&);
  void (*block_step)(benchmark::State&);
  void (*sum_copy)(benchmark::State&) = nullptr;  // the copy loop beside sum, registered once
};

/// Registers `cases` as "<case>/<impl>". The heavy cases run at least kMinTime of real time
/// (one call of the slowest takes longer, and then one call is what is timed), so the whole
/// binary stays within minutes on 2 cores; sum runs for Google Benchmark's default time.
inline bool register_train_cases(const std::string& impl, const TrainCases& cases) {
  constexpr double kMinTime = 0.2;
  auto add = [&](const std::string& c, auto fn) {
    benchmark::RegisterBenchmark((c + "/" + impl).c_str(), fn)->UseRealTime()->MinTime(kMinTime);
  };
  add(kMmName + "_fwd", [f = cases.matmul](benchmark::State& s) { f(s, 0); });
  add(kMmName + "_dinput", [f = cases.matmul](benchmark::State& s) { f(s, 1); });
  add(kMmName + "_dweight", [f = cases.matmul](benchmark::State& s) { f(s, 2); });
  for (const ConvCase& c : conv_cases())
    for (bool backward : {false, true})
      add(c.name(backward), [f = cases.conv, c, backward](benchmark::State& s) { f(s, c, backward); });
  for (const PoolCase& p : pool_cases())
    for (bool backward : {false, true})
      add(p.name(backward), [f = cases.pool, p, backward](benchmark::State& s) { f(s, p, backward); });
  add(kEmbedName, cases.embedding_backward);
  if (cases.sum_copy) benchmark::RegisterBenchmark((kSumName + "/copy").c_str(), cases.sum_copy)->UseRealTime();
  benchmark::RegisterBenchmark((kSumName + "/" + impl).c_str(), cases.sum)->UseRealTime();
  add(kDigitsName, cases.digits_step);
  add(kBlockName, cases.block_step);
  return true;
}

}  // namespace kiln::bench
