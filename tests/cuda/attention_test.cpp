// tests/cuda/attention_test.cpp -- the fused attention kernels (codegen/cuda/attention.h) on
// CUDA against the f64 composite on the CPU: f32, f16 and bf16; causal, bool and float masks;
// dropout (eager and traced, the same mask); sequences of 1, 7, 64 and 1000; head dims 32, 64
// and 128; values and gradients.
// Their memory grows linearly with the sequence, where the composite's grows with its square.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/cuda/attention.h"
#include "cuda/nvrtc.h"
#include "cuda/op_kernels.h"
#include "jit/trace.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"
#include "tests/nn/attention_cases.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

using test::FusedAttentionCase;
using test::kGpu;

TEST(CudaAttention, MatchesTheComposite) {
  REQUIRE_CUDA();
  const FusedAttentionCase cases[] = {
      {"plain_f32_e64", f32, 2, 2, 64, 64, 64},
      {"causal_f32_e32_t7", f32, 1, 2, 7, 7, 32, 0, true},
      {"bool_mask_f16_e64", DType::F16, 2, 1, 64, 40, 64, 1},
      {"float_mask_bf16_e128", DType::BF16, 1, 2, 7, 9, 128, 2},
      {"dropout_f32_e32", f32, 1, 2, 64, 33, 32, 0, false, 0.25},
      {"causal_f16_e128_t1", DType::F16, 2, 1, 1, 1, 128, 0, true},
      {"causal_bf16_e32_t1000", DType::BF16, 1, 1, 1000, 1000, 32, 0, true},
      // f16 and bf16 run the tensor-core kernels here (the host CUDA is an sm_90): head dims
      // that are not a multiple of 16, blocks of 128 rows with partial warps, L != S.
      {"dropout_bf16_e40", DType::BF16, 2, 2, 33, 70, 40, 0, false, 0.25},
      {"causal_f16_e96_t150", DType::F16, 1, 2, 150, 150, 96, 0, true},
      {"bool_mask_bf16_e128_t140", DType::BF16, 2, 1, 140, 130, 128, 1},
      {"float_mask_f16_e8_l200_s17", DType::F16, 1, 1, 200, 17, 8, 2},
      {"plain_bf16_e20", DType::BF16, 1, 3, 20, 45, 20},  // rows not in 16-byte pieces
      // The scalar kernels: odd head dims and partial warps in f32 and f64.
      {"bool_mask_f32_e20_l33", f32, 2, 1, 33, 45, 20, 1},
      {"float_mask_f64_e40", DType::F64, 1, 2, 17, 9, 40, 2},
      {"causal_dropout_f64_e33_t50", DType::F64, 1, 1, 50, 50, 33, 0, true, 0.2},
      {"float_mask_f32_e32", f32, 2, 1, 20, 30, 32, 2},
      {"plain_f32_e128", f32, 1, 1, 70, 70, 128},  // the scalar kernels' largest tiles
      {"dropout_f16_e64", DType::F16, 1, 2, 48, 48, 64, 0, false, 0.2},
      {"causal_dropout_f32_e64_t1000", f32, 1, 1, 1000, 1000, 64, 0, true, 0.1},  // GPT-2's, at T = 1000
  };
  for (const FusedAttentionCase& c : cases) test::expect_fused_matches_composite(c, kGpu, test::fused_rtol(c.dtype));
}

// The same draw on both devices: the dropout's mask comes from the state, not the device.
TEST(CudaAttention, DropoutMatchesTheCpu) {
  REQUIRE_CUDA();
  Tensor q = randn({1, 2, 9, 16}), k = randn({1, 2, 11, 16}), v = randn({1, 2, 11, 16});
  manual_seed(3);
  Tensor on_cpu = nn::scaled_dot_product_attention(q, k, v, {}, 0.5);
  manual_seed(3);
  Tensor on_gpu = nn::scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), {}, 0.5);
  test::expect_close(on_gpu.to(cpu), on_cpu.to_vector<double>(), 1e-5, 1e-6);
}

// Dropout's mask, forward and backward, in each kernel form (f32 and f64 scalar, f16 on the
// tensor cores), causal or not: several query blocks and key tiles, a key count that is no
// multiple of 4 (a row's draws start inside a Philox block) and one that is. The kernels draw
// each Philox block of a tile once, for four weights; the mask and the gradients are the CPU
// composite's.
TEST(CudaAttention, DropoutGradientsMatchTheCpuInEveryForm) {
  REQUIRE_CUDA();
  for (DType t : {f32, f64, DType::F16})
    for (bool causal : {false, true})
      for (int64_t s : {45, 40}) {
        SCOPED_TRACE(fmt::format("{} causal={} s={}", dtype_name(t), causal, s));
        manual_seed(11);
        Tensor q = randn({2, 2, 37, 16}).to(t), k = randn({2, 2, s, 16}).to(t), v = randn({2, 2, s, 16}).to(t);
        std::vector<Tensor> grads[2];
        Tensor outs[2];
        for (Device d : {cpu, kGpu}) {
          std::vector<Tensor> in;
          for (const Tensor& x : {q, k, v}) in.push_back(x.to(d).detach().requires_grad_());
          manual_seed(5);
          Tensor y = nn::scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.3, causal);
          sum(y.to(f32) * y.to(f32)).backward();
          const int at = d.is_cpu() ? 0 : 1;
          outs[at] = y.detach().to(cpu);
          for (const Tensor& x : in) grads[at].push_back(x.grad().to(cpu));
        }
        const double tol = t == f64 ? 1e-10 : t == f32 ? 1e-4 : 3e-2;
        test::expect_close(outs[1], outs[0].to_vector<double>(), tol, tol);
        for (size_t i = 0; i < 3; ++i) test::expect_close(grads[1][i], grads[0][i].to_vector<double>(), tol, tol);
      }
}

// Causal attention of q, k, v [B, H, T, E] with dropout p, traced, called 3 times beside the
// eager step (each pair from seed 40 + call): the loss and the gradients agree.
jit::Function expect_traced_matches_eager(Dims shape, double p) {
  auto leaf = [&] { return randn(shape).to(kGpu).requires_grad_(); };
  Tensor q = leaf(), k = leaf(), v = leaf();
  auto step = [p](Tensor a, Tensor b, Tensor c) {
    Tensor y = nn::scaled_dot_product_attention(a, b, c, {}, p, true);
    return sum(y * y);
  };
  jit::Function f = jit::trace(step, {q, k, v});
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE(call);
    std::vector<Tensor> got, want;
    for (bool traced : {true, false}) {
      for (Tensor* t : {&q, &k, &v}) t->set_grad({});
      manual_seed(40 + call);
      Tensor loss = traced ? f(q, k, v) : step(q, k, v);
      loss.backward();
      (traced ? got : want) = {loss, q.grad(), k.grad(), v.grad()};
    }
    for (size_t i = 0; i < got.size(); ++i)
      test::expect_close(got[i].to(cpu), want[i].to(cpu).to_vector<double>(), 1e-5, 1e-5);
  }
  return f;
}

// A traced step on CUDA keeps the op and its backward, and its later calls replay as CUDA
// graphs, with the eager step's results.
TEST(CudaAttention, TracedStepsReplayWithTheEagerResults) {
  REQUIRE_CUDA();
  jit::Function f = expect_traced_matches_eager({1, 2, 40, 32}, 0);
  EXPECT_GT(f.stats().graph_replays, 0) << f.stats().graph_refusal;
  EXPECT_NE(test::text_of(f.graph()).find(" = attention "), std::string::npos);
}

// With dropout, a traced step draws the eager step's mask from the same seed (both take their
// Philox offsets from the generator, call by call), so values and gradients agree.
TEST(CudaAttention, TracedDropoutDrawsTheEagerMask) {
  REQUIRE_CUDA();
  jit::Function f = expect_traced_matches_eager({2, 2, 24, 16}, 0.3);
  Tensor q = randn({2, 2, 24, 16}).to(kGpu), k = randn({2, 2, 24, 16}).to(kGpu), v = randn({2, 2, 24, 16}).to(kGpu);
  // Another seed, another mask: the trace does not replay the first draw.
  manual_seed(7);
  Tensor a = f(q, k, v);
  manual_seed(8);
  Tensor b = f(q, k, v);
  EXPECT_NE(a.item<double>(), b.item<double>());
}

// Peak memory of a forward and backward at T and 4T: the fused op's extra memory grows about
// 4x (its inputs, outputs and per-row statistics), the composite's about 16x (its T x T
// weights).
int64_t peak_bytes(int64_t t, bool fused) {
  Tensor q = randn({1, 1, t, 32}).to(kGpu).requires_grad_(), k = randn({1, 1, t, 32}).to(kGpu).requires_grad_(),
         v = randn({1, 1, t, 32}).to(kGpu).requires_grad_();
  cuda::synchronize();
  int64_t base = cuda::memory_stats(0).in_use;
  cuda::reset_peak_memory_stats(0);
  Attrs a;
  a.scale = 0.2, a.causal = true;
  std::vector<Tensor> in = {q, k, v};
  Tensor y = fused ? apply(OpId::Attention, in, a) : attention::composite(in, a);
  sum(y).backward();
  cuda::synchronize();
  return cuda::memory_stats(0).peak_in_use - base;
}

TEST(CudaAttention, MemoryGrowsLinearlyWithTheSequence) {
  REQUIRE_CUDA();
  peak_bytes(256, false);  // cuBLAS's workspace on this stream, made once, is not the sequence's
  int64_t fused_small = peak_bytes(256, true), fused_large = peak_bytes(1024, true);
  int64_t composite_small = peak_bytes(256, false), composite_large = peak_bytes(1024, false);
  std::cout << "peak bytes at T=256 and T=1024: fused " << fused_small << ", " << fused_large << "; composite "
            << composite_small << ", " << composite_large << "\n";
  EXPECT_LE(fused_large, 5 * fused_small);
  EXPECT_GE(composite_large, 10 * composite_small);
  EXPECT_LT(fused_large * 8, composite_large);
}

TEST(CudaAttention, KernelsFitSharedMemoryUpToHeadDim128) {
  for (DType t : {f32, DType::F16, DType::BF16, f64})
    for (auto pass :
         {codegen::CudaAttentionPass::Forward, codegen::CudaAttentionPass::Queries, codegen::CudaAttentionPass::Keys}) {
      codegen::CudaAttention k;
      k.pass = pass, k.dtype = t, k.e = 128, k.ev = 128;
      EXPECT_GE(codegen::cuda_attention_tile_rows(k), t == f64 ? 8 : 16) << dtype_name(t);
      EXPECT_LE(codegen::cuda_attention_shared_bytes(k), codegen::kCudaAttentionShared);
    }
}

// f16, bf16 and f32 take the tensor-core kernels on sm_80 and later, for head dims up to 128
// (f32's tiles, twice as wide, up to 64); f64 and larger heads the scalar ones. Their tiles fit
// shared memory for both passes, with dropout's flags too: the forward's 48 KiB, the one-kernel
// backward's 96 KiB (it keeps its 128 keys too).
TEST(CudaAttention, HalfAndF32TypesTakeTheTensorCores) {
  REQUIRE_CUDA();
  codegen::CudaAttention k;
  k.e = 64, k.ev = 64;
  for (DType t : {DType::F16, DType::BF16, f32, f64}) {
    k.dtype = t;
    EXPECT_EQ(cuda::attention_takes_mma(k, 0), t != f64) << dtype_name(t);
  }
  k.dtype = DType::BF16, k.e = 160;
  EXPECT_FALSE(cuda::attention_takes_mma(k, 0));
  k.dtype = f32, k.e = 128, k.ev = 128;
  EXPECT_FALSE(cuda::attention_takes_mma(k, 0)) << "f32 tiles of head dim 128 pass 48 KiB";
  for (DType t : {DType::F16, DType::BF16, f32})
    for (int64_t e : {1, 40, 128})
      for (auto pass : {codegen::CudaAttentionPass::Forward, codegen::CudaAttentionPass::Backward})
        for (bool dropout : {false, true}) {
          codegen::CudaAttention m;
          m.mma = true, m.pass = pass, m.dtype = t, m.e = e, m.ev = t == f32 ? 64 : 128, m.dropout = dropout;
          if (t == f32 && e == 128) continue;
          EXPECT_GE(codegen::cuda_attention_tile_rows(m), 16) << dtype_name(t) << " e=" << e;
          EXPECT_LE(codegen::cuda_attention_shared_bytes(m), pass == codegen::CudaAttentionPass::Forward
                                                                 ? codegen::kCudaAttentionShared
                                                                 : codegen::kCudaAttentionBackwardShared);
          EXPECT_EQ(codegen::cuda_attention_block_rows(m), 128);
        }
}

// With lse, the forward keeps each row's log-sum-exp (the composite's, in f32 for f16), and the
// tensor cores' backward is two kernels (the rows' statistics, then dq, dk and dv together):
// its dq, summed over 3 key blocks in a fixed order, is the same bits on every run, and so are
// the others. Without lse (an IR file saved before it), the backward runs the forward first.
TEST(CudaAttention, TheTensorCoresBackwardKeepsTheForwardsLogSumExp) {
  REQUIRE_CUDA();
  manual_seed(4);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Tensor q = randn({2, 2, 70, 64}), k = randn({2, 2, 300, 64}), v = randn({2, 2, 300, 64}), g = randn({2, 2, 70, 64});
    std::vector<Tensor> in;
    for (const Tensor& x : {q, k, v}) in.push_back(x.to(DType::F16).to(kGpu));
    Attrs a;
    a.scale = 0.125, a.causal = causal, a.lse = true;
    Tensor packed = apply(OpId::Attention, in, a);
    ASSERT_EQ(packed.shape(), (Dims{4 * 70 * 2 + 4 * 70 * 64}));
    Tensor lse = packed.slice(0, 0, 4 * 70 * 2).to(cpu).to(f32).reshape({4 * 70, 2}).sum({1});
    std::vector<Tensor> exact = {q.to(DType::F16).to(f64), k.to(DType::F16).to(f64), v.to(DType::F16).to(f64)};
    Tensor want = attention::composite_lse(exact, a).reshape({-1});
    test::expect_close(lse, want.to_vector<double>(), 2e-3, 2e-3);
    Tensor dout = g.to(DType::F16).to(kGpu);
    std::vector<Tensor> bin = {in[0], in[1], in[2], packed,
                               cat({zeros({4 * 70 * 2}, DType::F16, kGpu), dout.reshape({-1})}, 0)};
    int64_t before = cuda::kernel_launches();
    Tensor first = apply(OpId::AttentionBackward, bin, a);
    EXPECT_EQ(cuda::kernel_launches() - before, 2);
    Tensor again = apply(OpId::AttentionBackward, bin, a);
    EXPECT_TRUE(allclose(first.to(cpu), again.to(cpu), 0, 0)) << "the same bits run to run";
    Attrs plain = a;
    plain.lse = false;
    bin[3] = attention::output_of(packed, in[0], in[2]), bin[4] = dout;
    Tensor old_form = apply(OpId::AttentionBackward, bin, plain);
    EXPECT_TRUE(allclose(first.to(cpu), old_form.to(cpu), 0, 0));
  }
}

// f32 on the tensor cores keeps f32's accuracy (each product from three TF32 terms: the
// composite tests hold it to 1e-5); with TF32 allowed, as for matmuls, it rounds each operand
// to TF32 once: within TF32's error of the CPU, and no longer the same numbers.
TEST(CudaAttention, F32TakesThreeTf32TermsUnlessTf32IsAllowed) {
  REQUIRE_CUDA();
  manual_seed(2);
  Tensor q = randn({2, 3, 40, 64}), k = randn({2, 3, 50, 64}), v = randn({2, 3, 50, 64});
  Tensor want = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  Tensor exact = nn::scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), {}, 0.0, true).to(cpu);
  test::expect_close(exact, want.to_vector<double>(), 1e-5, 1e-5);
  const bool was = cuda::allow_tf32();
  cuda::set_allow_tf32(true);
  Tensor fast = nn::scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), {}, 0.0, true).to(cpu);
  cuda::set_allow_tf32(was);
  test::expect_close(fast, want.to_vector<double>(), 2e-2, 2e-2);
  EXPECT_GT(max(abs(fast - want)).item<double>(), 1e-5) << "TF32 rounds the operands";
}

// The toolkit's NVRTC compiles the kernels for the architectures kiln supports: each pass in
// every dtype, and every mask kind, causal and dropout in some dtype (they are #if blocks), in
// the scalar and the tensor-core forms.
TEST(Nvrtc, CompilesTheAttentionKernels) {
  if (test::on_host_cuda() && std::getenv("KILN_CUDA_NVRTC") && *std::getenv("KILN_CUDA_NVRTC"))
    GTEST_SKIP() << "run by ctest cuda_nvrtc with the toolkit's NVRTC";
  if (!cuda::nvrtc_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  using codegen::CudaAttentionMask;
  struct Variant {
    DType dtype;
    CudaAttentionMask mask;
    bool causal, dropout, mma = false, tf32 = false;
  };
  const Variant variants[] = {{f32, CudaAttentionMask::None, true, true},
                              {DType::F16, CudaAttentionMask::Bool, false, false},
                              {DType::BF16, CudaAttentionMask::Float, true, false},
                              {f64, CudaAttentionMask::Bool, false, true},
                              {DType::F16, CudaAttentionMask::Float, true, true, true},
                              {DType::BF16, CudaAttentionMask::Bool, false, true, true},
                              {DType::BF16, CudaAttentionMask::None, true, false, true},
                              {f32, CudaAttentionMask::Bool, true, true, true},
                              {f32, CudaAttentionMask::Float, false, false, true, true}};
  using Pass = codegen::CudaAttentionPass;
  for (const Variant& v : variants)
    for (Pass pass : {Pass::Forward, Pass::Rows, Pass::Queries, Pass::Keys, Pass::Backward}) {
      if (v.mma ? pass == Pass::Queries || pass == Pass::Keys : pass == Pass::Backward)
        continue;  // the scalar form's backward is Queries and Keys, the tensor cores' Backward
      codegen::CudaAttention k;
      k.pass = pass, k.dtype = v.dtype, k.e = v.dtype == f64 || (v.dtype == f32 && v.mma) ? 64 : 128, k.ev = 40;
      k.mask = v.mask, k.causal = v.causal, k.dropout = v.dropout, k.mma = v.mma, k.tf32 = v.tf32;
      std::string src = codegen::cuda_attention_kernel(k);
      for (int arch : {80, 90}) EXPECT_FALSE(cuda::compile_cubin(src, arch, "kiln_kernel").empty());
    }
}

}  // namespace
}  // namespace kiln
