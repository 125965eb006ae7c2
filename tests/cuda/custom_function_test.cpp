// tests/cuda/custom_function_test.cpp -- custom autograd functions (autograd/function.h) on
// cuda:0 (the host CUDA in CI): the node's backward runs on the forward's device and stream, its
// gradients match the CPU's eagerly and traced, and a gradient on another device is refused.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <vector>

#include "tests/cuda/cuda_test.h"
#include "tests/ops/reference.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

using autograd::AutogradContext;
using autograd::tensor_list;
using test::kGpu;

void expect_near_on_device(const Tensor& got, const Tensor& want) {
  ASSERT_TRUE(got.defined() && want.defined());
  EXPECT_EQ(got.device(), want.device());
  EXPECT_TRUE(test::all_close(got.to(cpu), want.to(cpu).to_vector<double>(), want.shape(), {1e-5, 1e-6}));
}

// x * sigmoid(x) with its derivative by hand, from the saved input and output.
struct Swish : autograd::Function<Swish> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor y = x * sigmoid(x);
    ctx->save_for_backward({x, y});
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    tensor_list s = ctx->get_saved_variables();
    Tensor sig = sigmoid(s[0]);
    return {g[0] * (s[1] + sig * (1 - s[1]))};
  }
};

// Its gradient on the CPU, wherever the input is.
struct GradOnTheCpu : autograd::Function<GradOnTheCpu> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 2; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {(g[0] * 2).to(cpu)}; }
};

TEST(CudaCustomFunction, GradientsMatchTheCpuEagerlyAndTraced) {
  REQUIRE_CUDA();
  manual_seed(11);
  Tensor x_cpu = randn({4, 33});
  Tensor w_cpu = randn({33, 5});
  auto loss = [](const Tensor& x, const Tensor& w) { return sum(Swish::apply(matmul(x, w)) * 0.5); };
  std::vector<Tensor> want;
  {
    Tensor w = w_cpu.clone().requires_grad_();
    loss(x_cpu, w).backward();
    want.push_back(w.grad());
  }
  Tensor w = w_cpu.to(kGpu).requires_grad_();
  Tensor h = Swish::apply(matmul(x_cpu.to(kGpu), w));
  EXPECT_EQ(h.grad_fn_name(), "kiln::(anonymous namespace)::SwishBackward");
  loss(x_cpu.to(kGpu), w).backward();
  expect_near_on_device(w.grad(), want[0].to(kGpu));
  w.zero_grad();
  auto fast = jit::trace([&](Tensor x) { return loss(x, w); }, {x_cpu.to(kGpu)});
  fast(x_cpu.to(kGpu)).backward();
  expect_near_on_device(w.grad(), want[0].to(kGpu));
}

TEST(CudaCustomFunction, AGradientOnAnotherDeviceIsRefused) {
  REQUIRE_CUDA();
  Tensor x = ones({3}, f32, kGpu).requires_grad_();
  test::expect_error([&] { GradOnTheCpu::apply(x).sum().backward(); },
                     {"GradOnTheCpu", "f32[3]", "cuda:0", "input's device"});
}

}  // namespace
}  // namespace kiln
