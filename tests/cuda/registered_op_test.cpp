// tests/cuda/registered_op_test.cpp -- a registered op whose CUDA kernel is the user's own
// (cuda::Kernel) on cuda:0 (the host CUDA in CI): eagerly against its CPU kernel in several
// dtypes, through its derivative by finite differences, inside a traced step whose later calls
// replay a CUDA graph, compiled once; and the error where an op has no CUDA kernel.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "jit/save.h"
#include "jit/trace.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"
#include "tests/ops/reference.h"

namespace kiln {
namespace {

using test::kGpu;

// y[..., j] = x[..., (j - shift) mod n]: each row rolled right by `shift` (torch.roll on the
// last dim), whose derivative rolls the gradient back.
const RegisteredOp& roll_rows() {
  static const cuda::Kernel kernel("roll_rows", {"x"}, {"y"}, R"(
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= y_dims.numel) return;
    long long n = y_dims.size[y_dims.ndim - 1];
    long long col = i % n;
    long long from = ((col - SHIFT) % n + n) % n;
    y[i] = x[i - col + from];
  )");
  static const RegisteredOp& op =
      register_op("kiln_test::roll_rows(Tensor x, int shift=1) -> Tensor")
          .rule([](const OpCall& c) {
            if (c.input(0).dim() == 0)
              throw Error("expected a tensor of at least one dim, got " + c.input(0).type().str());
            return TensorType{c.input(0).dtype(), c.input(0).shape()};
          })
          .cpu([](const OpCall& c) {
            const Tensor& x = c.input(0);
            int64_t n = x.shape().back();
            if (n == 0) return x.clone();
            int64_t s = ((c.get<int64_t>("shift") % n) + n) % n;
            return cat({x.slice(-1, n - s, n), x.slice(-1, 0, n - s)}, -1);
          })
          .cuda([](const OpCall& c, const cuda::Stream&) {
            const Tensor& x = c.input(0);
            cuda::KernelCall call;
            call.output_shapes = {x.shape()};
            call.output_dtypes = {x.dtype()};
            call.template_args = {{"SHIFT", c.get<int64_t>("shift")}};
            return kernel({x}, call)[0];
          })
          .derivative([](const OpCall& c, const Tensor&, const Tensor& grad) {
            return std::vector<Tensor>{roll_rows()(grad, -c.get<int64_t>("shift"))};
          });
  return op;
}

TEST(CudaRegisteredOp, TheUsersKernelMatchesTheCpuKernel) {
  REQUIRE_CUDA();
  for (DType t : {f32, f64, f16, bf16, i64, u8}) {
    for (int64_t shift : {1, -2, 7}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " shift " + std::to_string(shift));
      Tensor x = test::uniform({3, 5}, t, 0, 9, true).t();  // a transposed view: made contiguous first
      Tensor want = roll_rows()(x, shift);
      Tensor got = roll_rows()(x.to(kGpu), shift);
      EXPECT_EQ(got.device(), kGpu);
      EXPECT_TRUE(test::bitwise_equal(got.to(cpu), want)) << got.to(cpu) << want;
    }
  }
  EXPECT_EQ(roll_rows()(zeros({2, 0}).to(kGpu), 3).shape(), (Dims{2, 0}));
  test::expect_error([] { roll_rows()(zeros({}).to(kGpu)); }, {"kiln_test::roll_rows", "at least one dim", "f32[]"});
}

TEST(CudaRegisteredOp, ItsDerivativeMatchesFiniteDifferences) {
  REQUIRE_CUDA();
  std::vector<Tensor> x = {randn({4, 6}, f64).to(kGpu).requires_grad_()};
  EXPECT_EQ(autograd::gradcheck([](std::span<const Tensor> in) { return roll_rows()(sin(in[0]), 2) * in[0]; }, x), "");
}

TEST(CudaRegisteredOp, ATracedStepRunsItAndReplaysAsACudaGraph) {
  REQUIRE_CUDA();
  Tensor w = randn({8}).to(kGpu).requires_grad_();
  auto step = [&](Tensor x) { return sum(roll_rows()(x * w, 3) * x); };
  jit::Function f = jit::trace(step, {randn({4, 8}).to(kGpu)});
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE(call);
    Tensor x = randn({4, 8}).to(kGpu);
    w.set_grad({});
    Tensor got = f(x);
    got.backward();
    Tensor got_grad = w.grad();
    w.set_grad({});
    Tensor want = step(x);
    want.backward();
    test::expect_close(got.to(cpu), want.to(cpu).to_vector<double>(), 1e-5, 1e-5);
    test::expect_close(got_grad.to(cpu), w.grad().to(cpu).to_vector<double>(), 1e-5, 1e-5);
  }
  EXPECT_NE(test::text_of(f.graph()).find(" = kiln_test::roll_rows "), std::string::npos);
  EXPECT_GT(f.stats().graph_replays, 0) << f.stats().graph_refusal;
  // The kernel compiled once per dtype and shift: more calls compile nothing.
  jit::KernelCacheStats before = jit::kernel_cache_stats();
  f(randn({4, 8}).to(kGpu));
  roll_rows()(randn({4, 8}).to(kGpu), 3);
  EXPECT_EQ(jit::kernel_cache_stats().compiles, before.compiles);
}

TEST(CudaRegisteredOp, AKernelThatDisagreesWithItsRuleIsCaught) {
  REQUIRE_CUDA();
  static const RegisteredOp& op = register_op("kiln_test::cuda_disagreeing(Tensor x) -> Tensor")
                                      .rule([](const OpCall& c) { return c.input(0).type(); })
                                      .cuda([](const OpCall& c, const cuda::Stream&) { return zeros({3}).to(kGpu); });
  test::expect_error(
      [] {
        op(randn({2, 2}).to(kGpu));
      },
      {"kiln_test::cuda_disagreeing", "its cuda:0 kernel returned f32[3]@cuda:0",
       "its shape rule gives f32[2,2]@cuda:0", "must agree"});
}

// Traced on cuda:0, saved (for the CPU, as every one-device graph is), loaded onto the device.
TEST(CudaRegisteredOp, ASavedForwardLoadsAndRunsOnTheDevice) {
  REQUIRE_CUDA();
  NoGradGuard no_grad;
  Tensor w = randn({6}).to(kGpu);
  auto fn = [&](Tensor x) { return roll_rows()(x * w, 2) + 1; };
  jit::Function f = jit::trace(fn, {randn({3, 6}).to(kGpu)});
  f(randn({3, 6}).to(kGpu));
  std::string path = testing::TempDir() + "kiln_cuda_registered_" + std::to_string(::getpid()) + ".kiln";
  jit::save(f, path);
  jit::LoadedFunction loaded = jit::load(path, kGpu);
  std::remove(path.c_str());
  Tensor x = randn({3, 6}).to(kGpu);
  EXPECT_TRUE(test::bitwise_equal(loaded(x).to(cpu), fn(x).to(cpu)));
}

TEST(CudaRegisteredOp, AnOpWithoutACudaKernelSaysSo) {
  REQUIRE_CUDA();
  static const RegisteredOp& cpu_only = register_op("kiln_test::cpu_only(Tensor x) -> Tensor")
                                            .rule([](const OpCall& c) { return c.input(0).type(); })
                                            .cpu([](const OpCall& c) { return c.input(0) + 1; });
  test::expect_error([] { cpu_only(zeros({2}).to(kGpu)); }, {"kiln_test::cpu_only", "no CUDA kernel", "cuda:0"});
  test::expect_same(cpu_only(zeros({2})), ones({2}));
}

}  // namespace
}  // namespace kiln
