// tests/cuda/epilogue_test.cpp -- the addmm ops on CUDA: each is one cuBLASLt GEMM with its
// bias and activation as the epilogue (the host CUDA's cuBLASLt computes the epilogue it is
// asked for, so a wrong choice is a wrong result), and where cuBLASLt declines, the GEMM and a
// generated kernel give the same values. The pass that makes these ops is tested on its golden
// files (tests/ir/matmul-epilogue); their values and gradients in every dtype by the op suite.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>

#include "cuda/libraries.h"
#include "runtime/cuda_internal.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

using test::kGpu;

// act(a b + bias) on the CPU, in f64.
Tensor reference(OpId id, const Tensor& bias, const Tensor& a, const Tensor& b) {
  Tensor z = matmul(a.to(f64), b.to(f64)) + bias.to(f64);
  if (id == OpId::AddmmRelu) return relu(z);
  if (id == OpId::AddmmGeluTanh) return gelu(z, "tanh");
  return z;
}

struct Case {
  OpId op;
  DType dtype;
};

class CudaEpilogue : public ::testing::TestWithParam<Case> {};

TEST_P(CudaEpilogue, IsOneCublasLtCall) {
  REQUIRE_CUDA();
  auto [op, t] = GetParam();
  manual_seed(static_cast<uint64_t>(op) * 7 + static_cast<uint64_t>(t));
  Tensor bias = randn({24}), a = randn({17, 40}), b = randn({24, 40}).transpose(0, 1);  // b: a transposed view
  cuda::EpilogueStats before = cuda::epilogue_stats();
  Tensor got = apply(op, {bias.to(t).to(kGpu), a.to(t).to(kGpu), b.to(t).to(kGpu)});
  cuda::EpilogueStats after = cuda::epilogue_stats();
  if (test::on_host_cuda()) {
    EXPECT_EQ(after.fused, before.fused + 1);
    EXPECT_EQ(after.declined, before.declined);
  } else {  // a GPU's cuBLASLt may have no epilogue for a dtype (then the fallback ran)
    EXPECT_EQ(after.fused + after.declined, before.fused + before.declined + 1);
  }
  double tol = t == f64 ? 1e-12 : t == f32 ? 1e-4 : t == DType::F16 ? 2e-2 : 1e-1;
  Tensor want = reference(op, bias.to(t), a.to(t), b.to(t));
  EXPECT_LE((got.to(cpu).to(f64) - want).abs().max().item<double>(), tol * (1 + want.abs().max().item<double>()));
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaEpilogue,
                         ::testing::Values(Case{OpId::Addmm, f32}, Case{OpId::AddmmRelu, f32},
                                           Case{OpId::AddmmGeluTanh, f32}, Case{OpId::Addmm, f64},
                                           Case{OpId::AddmmRelu, DType::F16}, Case{OpId::AddmmGeluTanh, DType::BF16}),
                         [](const auto& info) {
                           return std::string(op_name(info.param.op)) + "_" + std::string(dtype_name(info.param.dtype));
                         });

// Where cuBLASLt has no algorithm (the host CUDA's refuses on request), the GEMM and one
// generated kernel for the bias and activation compute the same op.
TEST(CudaEpilogueFallback, TheGemmAndAKernelGiveTheSameValues) {
  REQUIRE_HOST_CUDA();
  manual_seed(8);
  Tensor bias = randn({9}), a = randn({6, 5}), b = randn({5, 9});
  for (OpId op : {OpId::Addmm, OpId::AddmmRelu, OpId::AddmmGeluTanh}) {
    Tensor fused = apply(op, {bias.to(kGpu), a.to(kGpu), b.to(kGpu)});
    setenv("KILN_HOST_CUBLASLT_REFUSE", "1", 1);
    cuda::EpilogueStats before = cuda::epilogue_stats();
    Tensor fallback = apply(op, {bias.to(kGpu), a.to(kGpu), b.to(kGpu)});
    cuda::EpilogueStats after = cuda::epilogue_stats();
    unsetenv("KILN_HOST_CUBLASLT_REFUSE");
    EXPECT_EQ(after.declined, before.declined + 1) << op_name(op);
    EXPECT_EQ(after.fused, before.fused) << op_name(op);
    EXPECT_TRUE(test::close_enough(fallback.to(cpu), fused.to(cpu))) << op_name(op);
    EXPECT_TRUE(test::close_enough(fallback.to(cpu), apply(op, {bias, a, b}))) << op_name(op);
  }
}

// Operands at any offset (views that start an element into a buffer): cuBLASLt is told their
// alignment (the bias's through its pointer, set before the heuristic query), so it picks an
// algorithm that holds for it (the host CUDA's refuses a call whose pointers, the bias's
// included, break what its algorithm assumed, as a GPU's kernel faults on them).
// In f64, gelu_tanh's epilogue declines: cuBLASLt's was about 1e-10 relative off on an H200, and
// the GEMM with kiln's kernel meets the double reference at 1e-12.
TEST(CudaEpilogueFallback, F64GeluIsTheGemmAndKilnsKernel) {
  REQUIRE_CUDA();
  Tensor bias = randn({24}, f64), a = randn({17, 40}, f64), b = randn({40, 24}, f64);
  cuda::EpilogueStats before = cuda::epilogue_stats();
  Tensor got = apply(OpId::AddmmGeluTanh, {bias.to(kGpu), a.to(kGpu), b.to(kGpu)});
  cuda::EpilogueStats after = cuda::epilogue_stats();
  EXPECT_EQ(after.declined, before.declined + 1);
  EXPECT_EQ(after.fused, before.fused);
  Tensor want = reference(OpId::AddmmGeluTanh, bias, a, b);
  EXPECT_LE((got.to(cpu) - want).abs().max().item<double>(), 1e-12 * (1 + want.abs().max().item<double>()));
}

TEST(CudaEpilogueAlignment, OffsetViewsRunFused) {
  REQUIRE_CUDA();
  manual_seed(9);
  Tensor packed = randn({1 + 24}), a = randn({17, 41}), b = randn({25, 40});
  Tensor bias = packed.slice(0, 1, 25), av = a.slice(1, 1, 41), bv = b.slice(0, 1, 25).transpose(0, 1);
  for (DType t : {f32, DType::F16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor gb = packed.to(t).to(kGpu).slice(0, 1, 25), ga = a.to(t).to(kGpu).slice(1, 1, 41),
           gbv = b.to(t).to(kGpu).slice(0, 1, 25).transpose(0, 1);
    cuda::EpilogueStats before = cuda::epilogue_stats();
    Tensor got = apply(OpId::AddmmRelu, {gb, ga, gbv});
    cuda::EpilogueStats after = cuda::epilogue_stats();
    if (test::on_host_cuda()) {
      EXPECT_EQ(after.fused, before.fused + 1);
    }
    double tol = t == f32 ? 1e-4 : 2e-2;
    Tensor want = reference(OpId::AddmmRelu, bias.to(t), av.to(t), bv.to(t));
    EXPECT_LE((got.to(cpu).to(f64) - want).abs().max().item<double>(), tol * (1 + want.abs().max().item<double>()));
  }
}

// A call cuBLASLt refuses after its heuristics chose (KILN_HOST_CUBLASLT_REFUSE=matmul) declines:
// the GEMM and a kernel compute it, no error.
TEST(CudaEpilogueAlignment, ARefusedCallFallsBack) {
  REQUIRE_HOST_CUDA();
  manual_seed(10);
  Tensor bias = randn({9}), a = randn({6, 5}), b = randn({5, 9});
  setenv("KILN_HOST_CUBLASLT_REFUSE", "matmul", 1);
  cuda::EpilogueStats before = cuda::epilogue_stats();
  Tensor got = apply(OpId::AddmmGeluTanh, {bias.to(kGpu), a.to(kGpu), b.to(kGpu)});
  cuda::EpilogueStats after = cuda::epilogue_stats();
  unsetenv("KILN_HOST_CUBLASLT_REFUSE");
  EXPECT_EQ(after.declined, before.declined + 1);
  EXPECT_TRUE(test::close_enough(got.to(cpu), apply(OpId::AddmmGeluTanh, {bias, a, b})));
}

}  // namespace
}  // namespace kiln
