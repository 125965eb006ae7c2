// benchmarks/cuda_bench.cpp -- kiln_cuda_bench: eager CUDA on cuda:0, each case beside the limit
// that gives it meaning (scripts/run.sh gpu runs it; without a GPU it says why and exits 0).
//
//   eager_add_1         what an eager op costs the host: x + y of one element, CPU and CUDA;
//                       user_kernel_add_1 the same through a user's cuda::Kernel
//   copy_64M            the device's copy bandwidth (read + write), the pointwise ops' limit
//   add_64M, gelu9_64M  x + y, and gelu (tanh) as 9 primitive ops eagerly: bytes moved by the
//                       minimal traffic (add: 3 x 4 B per element; gelu: 2 x 4 B), so the
//                       bytes/s of add beside copy's is the "85% of copy bandwidth" target
//   softmax, layer_norm [16384, 4096] f32
//   attention_causal    GPT-2 small's attention forward and backward, f32 and bf16: the fused
//                       op and the composite (torch_cuda_peer.py: F.scaled_dot_product_attention)
//   matmul_4096 f32 and bf16 through kiln, and the same GEMM called on cuBLAS directly
//   (cuda::gemm, no kiln op around it): kiln's overhead is their ratio
//   the MLP, digits CNN, ResNet block and transformer block training steps (bench_cases.h),
//   eager on cuda:0, the same steps as kiln_bench's CPU rows (step_bench.cpp, train_bench.cpp)
//   alloc_loop_1000     1000 eager ops on 16 MiB tensors with the caching allocator, and with
//                       its cache limit at 0 (every free returns memory to the driver): the
//                       paper's figure
//   .../traced          the same through jit::trace: gelu and softmax and layer_norm from
//                       primitives as fused NVRTC kernels, the MLP and transformer steps traced
//                       whole (forward, backward and update in one plan), replayed as a CUDA
//                       graph (counter graph_replays; the label says why not), and
//                       .../traced_no_graphs with CUDA graphs off: a launch per kernel
//   cuda/model/...      the example models' full-size training steps, eager and traced, with
//                       TF32 and under autocast(bf16), and their peak memory
//                       (cuda_models_bench.cpp; PyTorch's under the same names:
//                       benchmarks/torch_cuda_peer.py --models)
//   first_call          trace and first call of the gelu chain on cuda:0 in a fresh process
//                       (this binary with --kiln-first-call, its CUDA context made before the
//                       clock starts): NVRTC's compile with the disk cache off, the cubin read
//                       from a warm disk cache
//
// Every iteration ends with cuda::synchronize(), so the times are the device's work plus
// kiln's launch overhead, never the launches alone.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <kiln/kiln.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "benchmarks/bench_cases.h"
#include "cuda/libraries.h"
#include "runtime/backend.h"
#include "runtime/cuda_internal.h"
#include "runtime/files.h"
#include "runtime/op.h"
#include "runtime/ops/attention.h"

using namespace kiln;

namespace kiln::bench {
void register_model_cases();  // cuda_models_bench.cpp
}

namespace {

const Device kGpu = cuda::device(0);
constexpr int64_t k64M = int64_t{64} << 20;

// Runs `body` once untimed (first-use compiles and allocations), then times it.
template <class F> void timed(benchmark::State& s, F body) {
  body();
  cuda::synchronize();
  for (auto _ : s) {
    body();
    cuda::synchronize();
  }
}

void copy_64m(benchmark::State& s) {
  Tensor x = randn({k64M}, f32, kGpu), y = empty({k64M}, f32, kGpu);
  timed(s, [&] { y.copy_(x); });
  bench::count_bytes(s, 2.0 * 4 * double(k64M));
}

void add_64m(benchmark::State& s) {
  Tensor x = randn({k64M}, f32, kGpu), y = randn({k64M}, f32, kGpu);
  timed(s, [&] { benchmark::DoNotOptimize(x + y); });
  bench::count_bytes(s, 3.0 * 4 * double(k64M));
}

void gelu9_64m(benchmark::State& s) {
  Tensor x = randn({k64M}, f32, kGpu);
  timed(s, [&] { benchmark::DoNotOptimize(bench::gelu_9ops(x)); });
  bench::count_bytes(s, 2.0 * 4 * double(k64M));
}

// What an eager op costs the host: `x + y` on one-element tensors of `device`, timed without
// waiting for the device. Beside the CPU's, in one run: on the host CUDA with
// KILN_HOST_CUDA_HOST_ONLY=1 (launches checked, not run), the CUDA case is kiln's host work
// alone, the number issue 49's target (at most 4x the CPU's) reads.
void eager_add_1(benchmark::State& s, Device device) {
  Tensor x = randn({1}, f32, device), y = randn({1}, f32, device);
  benchmark::DoNotOptimize(x + y);  // compiles and caches
  cuda::synchronize();
  int64_t n = 0;
  for (auto _ : s) {
    benchmark::DoNotOptimize(x + y);
    if (++n % 4096 == 0) cuda::synchronize();  // a GPU's launch queue holds about a thousand
  }
  cuda::synchronize();
}

// The same for a user's kernel (cuda/kernel.h) computing x + y: a call that has run before finds
// its compiled variant in the kernel (no text, no hash), so it costs about an eager op.
void user_kernel_add_1(benchmark::State& s) {
  cuda::Kernel add("user_add", {"x", "y"}, {"z"}, R"(
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < z_dims.numel) z[i] = x[i] + y[i];
  )");
  Tensor x = randn({1}, f32, kGpu), y = randn({1}, f32, kGpu);
  cuda::KernelCall call;
  call.output_shapes = {x.shape()};
  call.output_dtypes = {f32};
  benchmark::DoNotOptimize(add({x, y}, call));  // compiles and caches
  cuda::synchronize();
  int64_t n = 0;
  for (auto _ : s) {
    benchmark::DoNotOptimize(add({x, y}, call));
    if (++n % 4096 == 0) cuda::synchronize();
  }
  cuda::synchronize();
}

// `fn` traced on `inputs`, then timed like the eager cases.
void traced(benchmark::State& s, const jit::TensorFn& fn, std::vector<Tensor> inputs) {
  jit::Function f = jit::trace_tensors(fn, inputs, "bench");
  timed(s, [&] { benchmark::DoNotOptimize(f.call(inputs)); });
  s.counters["kernels"] = double(f.stats().kernels);
}

void gelu9_64m_traced(benchmark::State& s) {
  traced(s, [](auto in) { return std::vector<Tensor>{bench::gelu_9ops(in[0])}; }, {randn({k64M}, f32, kGpu)});
  bench::count_bytes(s, 2.0 * 4 * double(k64M));
}

void softmax_prims_traced(benchmark::State& s) {
  traced(s, [](auto in) { return std::vector<Tensor>{bench::softmax_prims(in[0])}; },
         {randn({16384, 4096}, f32, kGpu)});
  bench::count_bytes(s, 2.0 * 4 * 16384 * 4096);
}

void layer_norm_prims_traced(benchmark::State& s) {
  traced(s, [](auto in) { return std::vector<Tensor>{bench::layer_norm_prims(in[0], in[1], in[2])}; },
         {randn({16384, 4096}, f32, kGpu), randn({4096}, f32, kGpu), randn({4096}, f32, kGpu)});
  bench::count_bytes(s, 2.0 * 4 * 16384 * 4096);
}

void softmax_rows(benchmark::State& s) {
  Tensor x = randn({16384, 4096}, f32, kGpu);
  timed(s, [&] { benchmark::DoNotOptimize(softmax(x, -1)); });
  bench::count_bytes(s, 2.0 * 4 * double(x.numel()));
}

void layer_norm_rows(benchmark::State& s) {
  Tensor x = randn({16384, 4096}, f32, kGpu), w = randn({4096}, f32, kGpu), b = randn({4096}, f32, kGpu);
  timed(s, [&] { benchmark::DoNotOptimize(layer_norm(x, {4096}, w, b)); });
  bench::count_bytes(s, 2.0 * 4 * double(x.numel()));
}

// Sampling from a language model: the 40 largest logits of each row of a GPT-2 vocabulary,
// and a whole row order (radix select and radix sort, cuda/sort.cpp).
void topk40_vocab(benchmark::State& s) {
  Tensor x = randn({4, 50257}, f32, kGpu);
  timed(s, [&] { benchmark::DoNotOptimize(topk(x, 40)); });
  bench::count_bytes(s, 4.0 * double(x.numel()));
}
void argsort_vocab(benchmark::State& s) {
  Tensor x = randn({4, 50257}, f32, kGpu);
  timed(s, [&] { benchmark::DoNotOptimize(argsort(x, -1, true)); });
  bench::count_bytes(s, 12.0 * double(x.numel()));
}

// GPT-2 small's causal self-attention, forward and backward: 8 x 12 heads x 1024 x 64, the
// fused op (tensor cores in bf16) and the composite it means. FLOPs: flash attention's count,
// 4 B H T^2 d forward and 2.5 times that backward, halved by the causal mask.
void attention_gpt2(benchmark::State& s, DType t, bool fused) {
  auto leaf = [t] { return randn({8, 12, 1024, 64}, f32, kGpu).to(t).requires_grad_(); };
  Tensor q = leaf(), k = leaf(), v = leaf(), g = randn({8, 12, 1024, 64}, f32, kGpu).to(t);
  Attrs a;
  a.scale = 0.125, a.causal = true;
  timed(s, [&] {
    std::vector<Tensor> in = {q, k, v};
    Tensor y = fused ? apply(OpId::Attention, in, a) : attention::composite(in, a);
    Tensor ys[] = {y}, gs[] = {g};
    benchmark::DoNotOptimize(autograd::grad(ys, in, gs));
  });
  bench::count_flops(s, 3.5 * 4.0 * 8 * 12 * 1024.0 * 1024 * 64 / 2);
}

constexpr int64_t kN = 4096;

void matmul_kiln(benchmark::State& s, DType t) {
  Tensor a = randn({kN, kN}, f32, kGpu).to(t), b = randn({kN, kN}, f32, kGpu).to(t);
  timed(s, [&] { benchmark::DoNotOptimize(matmul(a, b)); });
  bench::count_flops(s, 2.0 * double(kN) * kN * kN);
}

// The same product on cuBLAS with nothing of kiln's around it but the call: row-major C = A B
// is column-major C^T = B^T A^T.
void matmul_cublas(benchmark::State& s, DType t) {
  Tensor a = randn({kN, kN}, f32, kGpu).to(t), b = randn({kN, kN}, f32, kGpu).to(t), c = empty({kN, kN}, t, kGpu);
  timed(s, [&] {
    cuda::gemm(0, t, false, false, kN, kN, kN, b.data_ptr(), kN, 0, a.data_ptr(), kN, 0, c.data_ptr(), kN, 0, 1);
  });
  bench::count_flops(s, 2.0 * double(kN) * kN * kN);
}

// How a step runs: eagerly, traced whole (forward, backward and update in one plan, replayed
// as a CUDA graph), or traced whole with CUDA graphs off (a launch per kernel).
enum class Mode { Eager, Traced, TracedNoGraphs };

// One training step.
template <class Loss> void step(benchmark::State& s, optim::Optimizer& opt, Loss loss_of, double flops, Mode mode,
                                std::vector<Tensor> inputs) {
  auto one = [&](std::span<const Tensor> in) {
    opt.zero_grad();
    Tensor loss = loss_of(in);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  };
  if (mode != Mode::Eager) {
    bool graphs = jit::cuda_graphs_enabled();
    jit::set_cuda_graphs_enabled(mode == Mode::Traced);
    jit::Function f = jit::trace_tensors(one, inputs, "step");
    timed(s, [&] { benchmark::DoNotOptimize(f.call(inputs)); });
    jit::set_cuda_graphs_enabled(graphs);
    s.counters["kernels"] = double(f.stats().kernels);
    s.counters["graph_replays"] = double(f.stats().graph_replays);
    if (mode == Mode::Traced && !f.stats().graph_refusal.empty()) s.SetLabel("no graph: " + f.stats().graph_refusal);
  } else {
    timed(s, [&] { benchmark::DoNotOptimize(one(inputs)); });
  }
  if (flops > 0) bench::count_flops(s, flops);
}

void mlp_step(benchmark::State& s, Mode mode) {
  manual_seed(0);
  nn::Linear fc1(784, 256), fc2(256, 10);
  fc1.to(kGpu);
  fc2.to(kGpu);
  optim::SGD opt({fc1.weight, fc1.bias, fc2.weight, fc2.bias}, 0.01);
  Tensor x = randn({256, 784}, f32, kGpu), y = randint(0, 10, {256}, i64, kGpu);
  step(s, opt, [&](auto in) { return cross_entropy(fc2(relu(fc1(in[0]))), in[1]); }, bench::mlp_step_flops(256), mode,
       {x, y});
}

void digits_step(benchmark::State& s) {
  manual_seed(0);
  bench::DigitsNet net;
  net.to(kGpu);
  optim::Adam opt(net.parameters(), 3e-3);
  Tensor x = rand({bench::kDigitsBatch, 1, 8, 8}, f32, kGpu), y = randint(0, 10, {bench::kDigitsBatch}, i64, kGpu);
  step(s, opt, [&](auto in) { return cross_entropy(net(in[0]), in[1]); }, bench::digits_step_flops(bench::kDigitsBatch),
       Mode::Eager, {x, y});
}

void block_step(benchmark::State& s) {
  manual_seed(0);
  bench::BasicBlock net;
  net.to(kGpu);
  optim::SGD opt(net.parameters(), 0.01);
  const bench::ConvCase& c = bench::kBlockConv;
  Tensor x = randn({c.n, c.c, c.hw, c.hw}, f32, kGpu), target = randn({c.n, c.c, c.hw, c.hw}, f32, kGpu);
  step(s, opt, [&](auto in) { return mse_loss(net(in[0]), in[1]); }, bench::block_step_flops(), Mode::Eager,
       {x, target});
}

void encoder_step(benchmark::State& s, Mode mode) {
  using E = bench::EncoderBlock;
  manual_seed(0);
  E net;
  net.to(kGpu);
  optim::AdamW opt(net.parameters(), 1e-3);
  Tensor tokens = randint(0, E::kVocab, {E::kBatch, E::kSeq}, i64, kGpu);
  Tensor next = randint(0, E::kVocab, {E::kBatch * E::kSeq}, i64, kGpu);
  step(s, opt,
       [&](auto in) {
         return cross_entropy(net(in[0]).reshape({E::kBatch * E::kSeq, E::kVocab}), in[1]);
       },
       bench::encoder_step_flops(), mode, {tokens, next});
}

// 1000 eager ops, each allocating its result and freeing the one before: with the cache every
// allocation after the first few is a free-list hit; with the cache limit at 0, each is a
// device malloc and a free, which also synchronizes the device. The tensors are 16 MiB, each
// its own segment (smaller blocks share 2 or 20 MiB segments, which a limit of 0 cannot return
// while a neighbour lives).
void alloc_loop(benchmark::State& s, bool cached) {
  Allocator& memory = backend(kGpu).allocator(kGpu);
  int64_t limit = memory.stats().cache_limit;
  if (!cached) memory.set_cache_limit(0);
  int64_t mallocs_before = memory.stats().system_allocs;
  Tensor x0 = randn({4 << 20}, f32, kGpu);
  timed(s, [&] {
    Tensor x = x0;
    for (int i = 0; i < 1000; ++i) x = x * 1.0001f;
    benchmark::DoNotOptimize(x);
  });
  s.counters["device_mallocs_per_op"] =
      double(memory.stats().system_allocs - mallocs_before) / (1000.0 * double(s.iterations() + 1));
  memory.set_cache_limit(limit);
}

// The child's side of first_call: the CUDA context first (not what is measured), then the
// trace and first call of the gelu chain, to the device's completion; prints milliseconds.
int first_call_probe() {
  NoGradGuard g;
  Tensor x = randn({4096}, f32, kGpu);
  cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  jit::Function f = jit::trace([](Tensor x) { return bench::gelu_9ops(x); }, {x});
  f(x);
  cuda::synchronize();
  std::printf("%.4f\n", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

void register_all() {
  auto add = [](const std::string& name, std::function<void(benchmark::State&)> fn) {
    // A case that throws is reported as failed; the cases after it still run.
    return benchmark::RegisterBenchmark(("cuda/" + name).c_str(),
                                        [fn](benchmark::State& s) {
                                          try {
                                            fn(s);
                                          } catch (const std::exception& e) {
                                            s.SkipWithError(e.what());
                                          }
                                        })
        ->UseRealTime();
  };
  add("eager_add_1/cpu", [](benchmark::State& s) { eager_add_1(s, cpu); });
  add("eager_add_1/cuda", [](benchmark::State& s) { eager_add_1(s, kGpu); });
  add("user_kernel_add_1", user_kernel_add_1);
  add("copy_64M", copy_64m);
  add("add_64M", add_64m);
  add("gelu9_64M", gelu9_64m);
  add("gelu9_64M/traced", gelu9_64m_traced);
  add("softmax_prims[16384x4096]/traced", softmax_prims_traced);
  add("layer_norm_prims[16384x4096]/traced", layer_norm_prims_traced);
  add("softmax[16384x4096]", softmax_rows);
  add("layer_norm[16384x4096]", layer_norm_rows);
  add("topk40[4x50257]", topk40_vocab);
  add("argsort[4x50257]", argsort_vocab);
  for (DType t : {f32, DType::BF16})
    for (bool fused : {true, false})
      add(fmt::format("attention_causal[8x12x1024x64]_{}/{}", dtype_name(t), fused ? "fused" : "composite"),
          [t, fused](benchmark::State& s) { attention_gpt2(s, t, fused); });
  for (DType t : {f32, DType::BF16}) {
    std::string d(dtype_name(t));
    add("matmul_4096_" + d + "/kiln", [t](benchmark::State& s) { matmul_kiln(s, t); });
    add("matmul_4096_" + d + "/cublas", [t](benchmark::State& s) { matmul_cublas(s, t); });
  }
  add(bench::mlp_step_name(256), [](benchmark::State& s) { mlp_step(s, Mode::Eager); });
  add(bench::mlp_step_name(256) + "/traced", [](benchmark::State& s) { mlp_step(s, Mode::Traced); });
  add(bench::mlp_step_name(256) + "/traced_no_graphs", [](benchmark::State& s) { mlp_step(s, Mode::TracedNoGraphs); });
  add(bench::kDigitsName, digits_step);
  add(bench::kBlockName, block_step);
  add(bench::kEncoderName, [](benchmark::State& s) { encoder_step(s, Mode::Eager); });
  add(bench::kEncoderName + "/traced", [](benchmark::State& s) { encoder_step(s, Mode::Traced); });
  add(bench::kEncoderName + "/traced_no_graphs", [](benchmark::State& s) { encoder_step(s, Mode::TracedNoGraphs); });
  add("alloc_loop_1000/cached", [](benchmark::State& s) { alloc_loop(s, true); });
  add("alloc_loop_1000/uncached", [](benchmark::State& s) { alloc_loop(s, false); });
  for (bool warm : {false, true})
    benchmark::RegisterBenchmark(
        warm ? "cuda/first_call_warm_disk_cache/traced" : "cuda/first_call_cold_cache/traced",
        [warm](benchmark::State& s) { bench::first_call_in_child(s, warm, "--kiln-first-call"); })
        ->UseManualTime()
        ->Iterations(5);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--kiln-first-call") return first_call_probe();
  if (!cuda::is_available()) {
    std::printf("kiln_cuda_bench: skipped, no CUDA here: %s\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  std::printf("kiln_cuda_bench on cuda:0 (%d device(s)), TF32 %s\n", cuda::device_count(),
              cuda::allow_tf32() ? "on" : "off");
  register_all();
  bench::register_model_cases();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
