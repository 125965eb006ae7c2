// tests/jit/cost_test.cpp -- the cost model (jit/cost.h) against counts made here by hand: a
// fused group's bytes (its inputs read once, a broadcast operand at its own size, its result
// written once) and FLOPs, a matmul's and a causal attention's FLOPs, views costing nothing,
// the roofline bound on a device's data sheet, an eager step's floor (what it must keep for
// its backward and what its optimizer reads), and an unknown device named with the known.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "jit/cost.h"
#include "jit_test_util.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

using test::expect_error;

jit::Function traced(const std::function<Tensor(std::span<const Tensor>)>& fn, std::vector<Tensor> in) {
  jit::Function f = jit::trace_tensors([fn](std::span<const Tensor> x) { return std::vector<Tensor>{fn(x)}; }, in, "f");
  f.call(in);
  return f;
}

// Fusion on for a test (the suite also runs with KILN_FUSION=0).
struct Fusing {
  bool was = jit::fusion_enabled();
  Fusing() { jit::set_fusion_enabled(true); }
  ~Fusing() { jit::set_fusion_enabled(was); }
};

TEST(Cost, AFusedGroupReadsItsInputsAndWritesItsResultOnce) {
  // relu(x * w + 0.5), w broadcast over x's rows: one group, 3 ops an element.
  Fusing fusing;
  Tensor x = randn({64, 1000}), w = randn({1000});
  jit::Function f = traced([](std::span<const Tensor> in) { return relu(in[0] * in[1] + 0.5); }, {x, w});
  jit::PlanCost c = f.cost();
  ASSERT_EQ(c.kernels.size(), 1u) << jit::plan_cost(f.graph()).table(jit::device_peak("H200"));
  const jit::KernelCost& k = c.kernels[0];
  EXPECT_EQ(k.bytes_read, 64 * 1000 * 4 + 1000 * 4);  // x, and w at its own size
  EXPECT_EQ(k.bytes_written, 64 * 1000 * 4);
  EXPECT_EQ(k.flops, 3.0 * 64 * 1000);  // mul, add, relu
  EXPECT_EQ(k.launches, 1);
  EXPECT_EQ(k.unit, jit::MathUnit::Cores);
  const jit::DevicePeak& h200 = jit::device_peak("H200");
  EXPECT_DOUBLE_EQ(k.bound(h200), (64 * 1000 * 8 + 4000) / 4.8e12);  // bandwidth-bound
  EXPECT_DOUBLE_EQ(c.bound(h200), k.bound(h200));
  EXPECT_EQ(c.bytes(), 64 * 1000 * 8 + 4000);
}

TEST(Cost, AMatmulCountsTwoFlopsAMultiplyAddOnTheTensorCores) {
  Tensor a = randn({32, 64}), b = randn({64, 16});
  jit::Function f = traced([](std::span<const Tensor> in) { return matmul(in[0], in[1]); }, {a, b});
  jit::PlanCost c = f.cost();
  ASSERT_EQ(c.kernels.size(), 1u);
  const jit::KernelCost& k = c.kernels[0];
  EXPECT_EQ(k.name, "matmul");
  EXPECT_EQ(k.flops, 2.0 * 32 * 16 * 64);
  EXPECT_EQ(k.bytes_read, (32 * 64 + 64 * 16) * 4);
  EXPECT_EQ(k.bytes_written, 32 * 16 * 4);
  EXPECT_EQ(k.unit, jit::MathUnit::TensorCores);
  // f32 on the tensor cores runs at the FP32 rate unless TF32 is allowed.
  const jit::DevicePeak& a100 = jit::device_peak("A100");
  EXPECT_DOUBLE_EQ(k.rate(a100), a100.fp32);
  EXPECT_DOUBLE_EQ(k.rate(a100, /*tf32=*/true), a100.tf32);
  // A transpose is a view: nothing moves until the matmul reads it.
  jit::Function t =
      traced([](std::span<const Tensor> in) { return matmul(in[0], in[1].transpose(0, 1)); }, {a, randn({16, 64})});
  EXPECT_EQ(t.cost().kernels.size(), 1u);
}

TEST(Cost, CausalAttentionCountsTheKeptPairs) {
  // One head, L = S = 4, E = Ev = 2: causal keeps 1 + 2 + 3 + 4 = 10 pairs, each E + Ev
  // multiply-adds forward and 3E + 2Ev backward.
  Attrs a;
  a.causal = true;
  TensorType q{DType::F32, {1, 4, 2}, cpu};
  std::vector<TensorType> in = {q, q, q};
  EXPECT_EQ(op_def(OpId::Attention).flops(in, q, a), 2.0 * 10 * 4);
  EXPECT_EQ(op_def(OpId::AttentionBackward).flops(in, q, a), 2.0 * 10 * 10);
  a.causal = false;
  EXPECT_EQ(op_def(OpId::Attention).flops(in, q, a), 2.0 * 16 * 4);
}

TEST(Cost, ConvolutionsCountEachWindowsMultiplyAdds) {
  // x [2, 3, 8, 8], w [4, 3, 3, 3], padding 1: y [2, 4, 8, 8], 27 multiply-adds an element.
  Attrs a;
  TensorType x{DType::F32, {2, 3, 8, 8}, cpu}, w{DType::F32, {4, 3, 3, 3}, cpu}, y{DType::F32, {2, 4, 8, 8}, cpu};
  std::vector<TensorType> fwd = {x, w}, dx = {y, w}, dw = {x, y};
  EXPECT_EQ(op_def(OpId::Conv2d).flops(fwd, y, a), 2.0 * 2 * 4 * 64 * 27);
  EXPECT_EQ(op_def(OpId::Conv2dInputGrad).flops(dx, x, a), 2.0 * 2 * 4 * 64 * 27);
  EXPECT_EQ(op_def(OpId::Conv2dWeightGrad).flops(dw, w, a), 2.0 * 2 * 4 * 64 * 27);
}

TEST(Cost, AnEagerStepMovesTheSavedActivationsAndTheOptimizersOperands) {
  // h = relu(x W1), y = h W2, loss = sum(y * t), then W -= 0.1 dW: x [8, 16] and t [8, 4]
  // need no gradients, W1 [16, 32] and W2 [32, 4] do.
  manual_seed(3);
  Tensor w1 = randn({16, 32}).requires_grad_(), w2 = randn({32, 4}).requires_grad_();
  auto step = [&](std::span<const Tensor> in) {
    w1.set_grad(Tensor());
    w2.set_grad(Tensor());
    Tensor loss = sum(matmul(relu(matmul(in[0], w1)), w2) * in[1]);
    loss.backward();
    NoGradGuard no_grad;
    w1.sub_(w1.grad() * 0.1);
    w2.sub_(w2.grad() * 0.1);
    return std::vector<Tensor>{loss.detach()};
  };
  std::vector<Tensor> in = {randn({8, 16}), randn({8, 4})};
  jit::Function f = jit::trace_tensors(step, in, "step");
  f.call(in);
  jit::EagerFloor e = f.eager_floor();
  // Kept for the backward: h [8, 32] (dW2 = h^T dy, and relu's gradient masks by it); read
  // again: x (dW1 = x^T dpre), t (dy = t), W2 (dh = dy W2^T). W1 is not: x needs no gradient.
  EXPECT_EQ(e.activations, 8 * 32 * 4);
  EXPECT_EQ(e.reread, (8 * 16 + 8 * 4 + 32 * 4) * 4);
  EXPECT_EQ(e.parameters, (16 * 32 + 32 * 4) * 4);
  EXPECT_EQ(e.gradients, e.parameters);
  EXPECT_EQ(e.state, 0);
  EXPECT_EQ(e.inputs, (8 * 16 + 8 * 4) * 4);
  EXPECT_EQ(e.bytes(), 2 * e.activations + e.reread + 3 * e.parameters + 2 * e.gradients + e.inputs);
  // FLOPs: the forward's two matmuls, the backward's three (dW1, dW2, dh), 2mnk each.
  double matmuls = 0;
  for (const jit::KernelCost& k : e.math)
    if (k.name == "matmul") matmuls += k.flops;
  EXPECT_EQ(matmuls, 2.0 * (8 * 16 * 32 + 8 * 32 * 4) + 2.0 * (16 * 8 * 32 + 32 * 8 * 4 + 8 * 4 * 32));
  const jit::DevicePeak& h200 = jit::device_peak("H200");
  EXPECT_GE(e.bound(h200), static_cast<double>(e.bytes()) / h200.bandwidth);
}

TEST(Cost, AnUnknownDeviceIsNamedWithTheKnownOnes) {
  expect_error([] { jit::device_peak("V100"); }, {"V100", "A100, H100, H200"});
  EXPECT_EQ(jit::device_peak_names().size(), 3u);
}

}  // namespace
}  // namespace kiln
