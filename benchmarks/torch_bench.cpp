// benchmarks/torch_bench.cpp -- the same cases as eager_bench.cpp, through LibTorch (built
// only when Debian's libtorch-dev is installed), on the same number of threads.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <kiln/kiln.h>

namespace {

constexpr int64_t k16M = 16 << 20;

}  // namespace

extern "C" void openblas_set_num_threads(int);

namespace {

// LibTorch gets as many threads as kiln, for its own loops and for the OpenBLAS both link
// (kiln keeps OpenBLAS single-threaded inside its own chunks, so the setting is restored).
struct SameThreads {
  SameThreads() {
    torch::set_num_threads(kiln::num_threads());
    openblas_set_num_threads(kiln::num_threads());
  }
  ~SameThreads() { openblas_set_num_threads(1); }
};

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

void BM_TorchGelu9(benchmark::State& s) {
  SameThreads threads;
  auto x = torch::randn({k16M});
  for (auto _ : s) {
    auto cube = x * x * x;
    auto inner = (x + cube * 0.044715f) * 0.7978845608f;
    benchmark::DoNotOptimize(x * 0.5f * (torch::tanh(inner) + 1.0f));
  }
  s.SetBytesProcessed(s.iterations() * k16M * 4 * 2);
}
BENCHMARK(BM_TorchGelu9)->Name("gelu_9ops_16M/torch")->UseRealTime();

void BM_TorchGeluKernel(benchmark::State& s) {  // LibTorch's own single kernel, for reference
  SameThreads threads;
  auto x = torch::randn({k16M});
  benchmark::DoNotOptimize(torch::gelu(x, "tanh"));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(torch::gelu(x, "tanh"));
  s.SetBytesProcessed(s.iterations() * k16M * 4 * 2);
}
BENCHMARK(BM_TorchGeluKernel)->Name("gelu_at::gelu_16M/torch")->UseRealTime();

void BM_TorchMatmul(benchmark::State& s) {
  SameThreads threads;
  auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  benchmark::DoNotOptimize(torch::matmul(a, b));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(torch::matmul(a, b));
  s.counters["GFLOP/s"] = benchmark::Counter(2.0 * 1024 * 1024 * 1024 * double(s.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TorchMatmul)->Name("matmul_1024/torch")->UseRealTime();

void BM_TorchSoftmax(benchmark::State& s) {
  SameThreads threads;
  auto a = torch::randn({4096, 1024});
  benchmark::DoNotOptimize(torch::softmax(a, -1));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(torch::softmax(a, -1));
  s.SetBytesProcessed(s.iterations() * a.numel() * 4 * 2);
}
BENCHMARK(BM_TorchSoftmax)->Name("softmax_4096x1024/torch")->UseRealTime();

void BM_TorchLayerNorm(benchmark::State& s) {
  SameThreads threads;
  auto a = torch::randn({4096, 1024}), w = torch::randn({1024}), b = torch::randn({1024});
  benchmark::DoNotOptimize(torch::layer_norm(a, {1024}, w, b));  // warm-up: first-touch page faults stay out of the timing
  for (auto _ : s) benchmark::DoNotOptimize(torch::layer_norm(a, {1024}, w, b));
  s.SetBytesProcessed(s.iterations() * a.numel() * 4 * 2);
}
BENCHMARK(BM_TorchLayerNorm)->Name("layer_norm_4096x1024/torch")->UseRealTime();

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
