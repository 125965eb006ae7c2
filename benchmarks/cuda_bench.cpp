// benchmarks/cuda_bench.cpp -- kiln_cuda_bench: eager CUDA on cuda:0, each case beside the limit
// that gives it meaning (scripts/run.sh gpu runs it; without a GPU it says why and exits 0).
//
//   copy_64M            the device's copy bandwidth (read + write), the pointwise ops' limit
//   add_64M, gelu9_64M  x + y, and gelu (tanh) as 9 primitive ops eagerly: bytes moved by the
//                       minimal traffic (add: 3 x 4 B per element; gelu: 2 x 4 B), so the
//                       bytes/s of add beside copy's is the "85% of copy bandwidth" target
//   softmax, layer_norm [16384, 4096] f32
//   matmul_4096 f32 and bf16 through kiln, and the same GEMM called on cuBLAS directly
//   (cuda::gemm, no kiln op around it): kiln's overhead is their ratio
//   the MLP, digits CNN, ResNet block and transformer block training steps (bench_cases.h),
//   eager on cuda:0, the same steps as kiln_bench's CPU rows (step_bench.cpp, train_bench.cpp)
//   alloc_loop_1000     1000 eager ops on 16 MiB tensors with the caching allocator, and with
//                       its cache limit at 0 (every free returns memory to the driver): the
//                       paper's figure
//
// Every iteration ends with cuda::synchronize(), so the times are the device's work plus
// kiln's launch overhead, never the launches alone.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <kiln/kiln.h>

#include <cstdio>
#include <functional>
#include <string>

#include "benchmarks/bench_cases.h"
#include "runtime/backend.h"
#include "runtime/cuda_kernels.h"

using namespace kiln;

namespace {

const Device kGpu = cuda::device(0);
constexpr int64_t k64M = int64_t{64} << 20;

// Runs `body` once untimed (first-use compiles and allocations), then times it.
template <class F>
void timed(benchmark::State& s, F body) {
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

template <class Loss>
void step(benchmark::State& s, optim::Optimizer& opt, Loss loss_of, double flops) {
  timed(s, [&] {
    opt.zero_grad();
    loss_of().backward();
    opt.step();
  });
  if (flops > 0) bench::count_flops(s, flops);
}

void mlp_step(benchmark::State& s) {
  manual_seed(0);
  nn::Linear fc1(784, 256), fc2(256, 10);
  fc1.to(kGpu);
  fc2.to(kGpu);
  optim::SGD opt({fc1.weight, fc1.bias, fc2.weight, fc2.bias}, 0.01);
  Tensor x = randn({256, 784}, f32, kGpu), y = randint(0, 10, {256}, i64, kGpu);
  step(s, opt, [&] { return cross_entropy(fc2(relu(fc1(x))), y); }, bench::mlp_step_flops(256));
}

void digits_step(benchmark::State& s) {
  manual_seed(0);
  bench::DigitsNet net;
  net.to(kGpu);
  optim::Adam opt(net.parameters(), 3e-3);
  Tensor x = rand({bench::kDigitsBatch, 1, 8, 8}, f32, kGpu), y = randint(0, 10, {bench::kDigitsBatch}, i64, kGpu);
  step(s, opt, [&] { return cross_entropy(net(x), y); }, bench::digits_step_flops(bench::kDigitsBatch));
}

void block_step(benchmark::State& s) {
  manual_seed(0);
  bench::BasicBlock net;
  net.to(kGpu);
  optim::SGD opt(net.parameters(), 0.01);
  const bench::ConvCase& c = bench::kBlockConv;
  Tensor x = randn({c.n, c.c, c.hw, c.hw}, f32, kGpu), target = randn({c.n, c.c, c.hw, c.hw}, f32, kGpu);
  step(s, opt, [&] { return mse_loss(net(x), target); }, bench::block_step_flops());
}

void encoder_step(benchmark::State& s) {
  using E = bench::EncoderBlock;
  manual_seed(0);
  E net;
  net.to(kGpu);
  optim::AdamW opt(net.parameters(), 1e-3);
  Tensor tokens = randint(0, E::kVocab, {E::kBatch, E::kSeq}, i64, kGpu);
  Tensor next = randint(0, E::kVocab, {E::kBatch * E::kSeq}, i64, kGpu);
  step(s, opt, [&] { return cross_entropy(net(tokens).reshape({E::kBatch * E::kSeq, E::kVocab}), next); },
       bench::encoder_step_flops());
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

void register_all() {
  auto add = [](const std::string& name, std::function<void(benchmark::State&)> fn) {
    return benchmark::RegisterBenchmark(("cuda/" + name).c_str(), [fn](benchmark::State& s) { fn(s); })->UseRealTime();
  };
  add("copy_64M", copy_64m);
  add("add_64M", add_64m);
  add("gelu9_64M", gelu9_64m);
  add("softmax[16384x4096]", softmax_rows);
  add("layer_norm[16384x4096]", layer_norm_rows);
  for (DType t : {f32, DType::BF16}) {
    std::string d(dtype_name(t));
    add("matmul_4096_" + d + "/kiln", [t](benchmark::State& s) { matmul_kiln(s, t); });
    add("matmul_4096_" + d + "/cublas", [t](benchmark::State& s) { matmul_cublas(s, t); });
  }
  add(bench::mlp_step_name(256), mlp_step);
  add(bench::kDigitsName, digits_step);
  add(bench::kBlockName, block_step);
  add(bench::kEncoderName, encoder_step);
  add("alloc_loop_1000/cached", [](benchmark::State& s) { alloc_loop(s, true); });
  add("alloc_loop_1000/uncached", [](benchmark::State& s) { alloc_loop(s, false); });
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::is_available()) {
    std::printf("kiln_cuda_bench: skipped, no CUDA here: %s\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  std::printf("kiln_cuda_bench on cuda:0 (%d device(s)), TF32 %s\n", cuda::device_count(),
              cuda::allow_tf32() ? "on" : "off");
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
