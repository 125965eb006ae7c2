// tests/cuda/training_test.cpp -- training on cuda:0 (the host CUDA in CI) as on the CPU:
// autograd's gradients, an optimizer step, dropout's masks, a backward on the forward's stream, a
// DataLoader's pinned batches, and the digits CNN trained for an epoch to the CPU's accuracy.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "examples/digits_data.h"
#include "examples/digits_net.h"
#include "tests/cuda/cuda_test.h"
#include "tests/ops/reference.h"

namespace kiln {
namespace {

using test::kGpu;

void expect_near(const Tensor& got, const Tensor& want, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_TRUE(got.defined() && want.defined());
  EXPECT_TRUE(test::all_close(got.to(cpu), want.to(cpu).to_vector<double>(), want.shape(), {rtol, atol}));
}

struct Mlp : nn::Module {
  nn::Linear fc1{16, 32}, fc2{32, 5};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(gelu(fc1(x))); }
};

TEST(CudaTraining, GradientsMatchTheCpu) {
  REQUIRE_CUDA();
  manual_seed(4);
  Mlp cpu_net, gpu_net;
  gpu_net.load_state_dict(cpu_net.state_dict());
  gpu_net.to(kGpu);
  Tensor x = randn({8, 16}), y = randint(0, 5, {8});
  Tensor l_cpu = cross_entropy(cpu_net(x), y);
  Tensor l_gpu = cross_entropy(gpu_net(x.to(kGpu)), y.to(kGpu));
  EXPECT_EQ(l_gpu.device(), kGpu);
  expect_near(l_gpu, l_cpu);
  l_cpu.backward();
  l_gpu.backward();
  auto cp = cpu_net.named_parameters(), gp = gpu_net.named_parameters();
  ASSERT_EQ(cp.size(), gp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    SCOPED_TRACE(cp[i].first);
    EXPECT_EQ(gp[i].second.grad().device(), kGpu);
    expect_near(gp[i].second.grad(), cp[i].second.grad());
  }
}

TEST(CudaTraining, AdamStepsMatchTheCpu) {
  REQUIRE_CUDA();
  manual_seed(5);
  Mlp cpu_net, gpu_net;
  gpu_net.load_state_dict(cpu_net.state_dict());
  gpu_net.to(kGpu);
  optim::Adam cpu_opt(cpu_net.parameters(), 1e-2), gpu_opt(gpu_net.parameters(), 1e-2);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({8, 16}), y = randint(0, 5, {8});
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    cross_entropy(cpu_net(x), y).backward();
    cross_entropy(gpu_net(x.to(kGpu)), y.to(kGpu)).backward();
    cpu_opt.step();
    gpu_opt.step();
  }
  auto cp = cpu_net.named_parameters(), gp = gpu_net.named_parameters();
  for (size_t i = 0; i < cp.size(); ++i) {
    SCOPED_TRACE(cp[i].first);
    EXPECT_EQ(gp[i].second.device(), kGpu);
    expect_near(gp[i].second, cp[i].second, 1e-4, 1e-5);
  }
}

TEST(CudaTraining, DropoutDrawsTheCpusMask) {
  REQUIRE_CUDA();
  Tensor x = ones({64, 33});
  manual_seed(9);
  Tensor on_cpu = nn::dropout(x, 0.25, true);
  manual_seed(9);
  Tensor on_gpu = nn::dropout(x.to(kGpu), 0.25, true);
  EXPECT_EQ(on_gpu.device(), kGpu);
  EXPECT_EQ(on_gpu.to(cpu).to_vector<float>(), on_cpu.to_vector<float>());
}

// As in PyTorch, each backward op runs on the stream its forward ran on.
TEST(CudaTraining, BackwardRunsOnTheForwardsStream) {
  REQUIRE_CUDA();
  cuda::Stream side = cuda::Stream::create();
  Tensor w = randn({6, 6}).to(kGpu).requires_grad_();
  Tensor loss;
  {
    cuda::StreamGuard g(side);
    loss = (matmul(w, w) * 3.0).sum();
  }
  loss.backward();  // from the default stream: the engine orders the side stream's work first
  Tensor wc = w.detach().to(cpu).requires_grad_();
  (matmul(wc, wc) * 3.0).sum().backward();
  expect_near(w.grad(), wc.grad());
}

// The digits CNN (the demo's), one epoch on cuda:0 from the same weights and batches as on the
// CPU: the same accuracy on the held-out images, within an image or two (float rounding).
TEST(CudaTraining, ADataLoaderPinsItsBatchesWhenAsked) {
  REQUIRE_CUDA();
  manual_seed(5);
  data::TensorDataset ds({randn({10, 3}), arange(10)});
  manual_seed(6);
  std::vector<std::vector<Tensor>> plain, pinned;
  for (auto b : data::DataLoader(ds, 4, true)) plain.push_back(b);
  manual_seed(6);
  for (auto b : data::DataLoader(ds, {.batch_size = 4, .shuffle = true, .pin_memory = true})) pinned.push_back(b);
  ASSERT_EQ(pinned.size(), 3u);
  ASSERT_EQ(plain.size(), 3u);
  for (size_t i = 0; i < pinned.size(); ++i)
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_TRUE(pinned[i][k].is_pinned()) << "batch " << i << ", tensor " << k;
      EXPECT_FALSE(plain[i][k].is_pinned());
      expect_near(pinned[i][k].to(kGpu).to(cpu), plain[i][k], 0, 0);
    }
}

TEST(CudaTraining, TheDigitsCnnTrainsAnEpochToTheCpusAccuracy) {
  REQUIRE_CUDA();
  if (access(examples::kDigitsData, R_OK) != 0)
    GTEST_SKIP() << examples::kDigitsData << " is missing (scripts/deps.sh installs python3-sklearn)";
  auto digits = examples::load_digits();  // not a structured binding: clang 14 cannot capture one
  Tensor images = digits.first, labels = digits.second;
  manual_seed(0);
  Tensor order = randperm(images.shape()[0]);
  images = index_select(images, 0, order);
  labels = index_select(labels, 0, order);
  int64_t n_train = images.shape()[0] - 360;
  // Eagerly, or with the whole step traced (forward, backward and Adam's update as one plan
  // of fused kernels, cuDNN and cuBLAS calls).
  auto train = [&](Device d, bool traced) {
    manual_seed(1);
    examples::DigitsNet net;
    net.to(d);
    optim::Adam opt(net.parameters(), 3e-3);
    auto step = [&](Tensor x, Tensor y) {
      opt.zero_grad();
      Tensor loss = cross_entropy(net(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    std::optional<jit::Function> fast;
    if (traced) fast = jit::trace(step, {images.narrow(0, 0, 32).to(d), labels.narrow(0, 0, 32).to(d)}, "step");
    for (int64_t i = 0; i + 32 <= n_train; i += 32) {
      Tensor x = images.narrow(0, i, 32).to(d), y = labels.narrow(0, i, 32).to(d);
      if (fast) (*fast)(x, y);
      else step(x, y);
    }
    if (fast) {
      EXPECT_GE(fast->stats().kernels, 2) << "the traced step fused nothing";
    }
    NoGradGuard no_grad;
    net.eval();
    Tensor test_x = images.narrow(0, n_train, 360).to(d), test_y = labels.narrow(0, n_train, 360).to(d);
    return sum(argmax(net(test_x), 1) == test_y).item<double>() / 360.0;
  };
  double cpu_acc = train(cpu, false), gpu_acc = train(kGpu, false), traced_acc = train(kGpu, true);
  std::printf("digits CNN, one epoch: test accuracy %.2f%% on the CPU, %.2f%% on cuda:0, %.2f%% traced on cuda:0\n",
              100 * cpu_acc, 100 * gpu_acc, 100 * traced_acc);
  EXPECT_GT(cpu_acc, 0.5) << "the CPU's epoch did not learn: the test proves nothing";
  EXPECT_NEAR(gpu_acc, cpu_acc, 2.5 / 360) << "cuda:0 reached " << gpu_acc << ", the CPU " << cpu_acc;
  EXPECT_NEAR(traced_acc, cpu_acc, 2.5 / 360)
      << "the traced step on cuda:0 reached " << traced_acc << ", the CPU " << cpu_acc;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Mixed precision on the device as on the CPU: under AutocastGuard(f16) the linear layers run
// in f16 on cuda:0 and the loss in f32, and a GradScaler's scaled steps (its overflow check and
// unscaling read on the host) train the f32 parameters as the same steps do on the CPU.
TEST(CudaTraining, AutocastAndAGradScalerTrainAsOnTheCpu) {
  REQUIRE_CUDA();
  manual_seed(6);
  Mlp cpu_net, gpu_net;
  gpu_net.load_state_dict(cpu_net.state_dict());
  gpu_net.to(kGpu);
  optim::SGD cpu_opt(cpu_net.parameters(), 0.05), gpu_opt(gpu_net.parameters(), 0.05);
  amp::GradScaler cpu_scaler, gpu_scaler;
  Tensor x = randn({8, 16}), y = randint(0, 5, {8});
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    Tensor lc, lg;
    {
      AutocastGuard autocast(f16);
      Tensor hidden = gpu_net.fc1(x.to(kGpu));
      EXPECT_EQ(hidden.dtype(), f16);
      EXPECT_EQ(hidden.device(), kGpu);
      lc = cross_entropy(cpu_net(x), y);
      lg = cross_entropy(gpu_net(x.to(kGpu)), y.to(kGpu));
    }
    EXPECT_EQ(lg.dtype(), f32);
    expect_near(lg, lc, 2e-3, 2e-3);  // f16 matmuls: the two devices round their sums apart
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    cpu_scaler.scale(lc).backward();
    gpu_scaler.scale(lg).backward();
    EXPECT_TRUE(cpu_scaler.step(cpu_opt));
    EXPECT_TRUE(gpu_scaler.step(gpu_opt));
    cpu_scaler.update();
    gpu_scaler.update();
    EXPECT_EQ(gpu_scaler.get_scale(), cpu_scaler.get_scale());
  }
  auto cp = cpu_net.named_parameters(), gp = gpu_net.named_parameters();
  for (size_t i = 0; i < cp.size(); ++i) {
    SCOPED_TRACE(cp[i].first);
    EXPECT_EQ(gp[i].second.dtype(), f32);
    expect_near(gp[i].second, cp[i].second, 2e-3, 2e-3);
  }
}

}  // namespace
}  // namespace kiln
