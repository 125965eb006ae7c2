// tests/cuda/jit_test.cpp -- traced functions on CUDA tensors: their fused groups run as NVRTC
// kernels (codegen/cuda) on the device, forward, through the compiled backward, and as whole
// training steps, each against the same function run eagerly on the CPU. On the host CUDA in
// CI (the generated CUDA C compiled for the host and run there) and on a GPU under
// scripts/run.sh gpu.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cuda/group.h"
#include "examples/digits_net.h"
#include "ir/graph.h"
#include "jit/save.h"
#include "jit/trace.h"
#include "tests/cuda/cuda_test.h"
#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

using test::kGpu;

std::vector<Tensor> on(Device d, const std::vector<Tensor>& xs) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.to(d));
  return out;
}

struct Program {
  std::string name;
  std::function<std::vector<Tensor>(std::span<const Tensor>)> fn;
  std::vector<Tensor> inputs;  // on the CPU
  int64_t min_kernels = 1;
};

std::vector<Program> programs() {
  manual_seed(11);
  auto gelu9 = [](const Tensor& x) {
    Tensor cube = x * x * x;
    Tensor inner = (x + cube * 0.044715f) * 0.7978845608f;
    return x * 0.5f * (tanh(inner) + 1.0f);
  };
  return {
      {"gelu_from_9_ops", [=](auto in) { return std::vector<Tensor>{gelu9(in[0])}; }, {randn({37, 129})}},
      {"softmax_from_primitives",
       [](auto in) {
         Tensor e = exp(in[0] - amax(in[0], {-1}, true));
         return std::vector<Tensor>{e / e.sum({-1}, true)};
       },
       {randn({5, 7, 300})}},
      {"layer_norm_from_primitives",
       [](auto in) {
         Tensor d = in[0] - in[0].mean({-1}, true);
         Tensor var = (d * d).mean({-1}, true);
         return std::vector<Tensor>{d * rsqrt(var + 1e-5f) * in[1] + in[2]};
       },
       {randn({33, 257}), randn({257}), randn({257})}},
      {"two_outputs_of_one_group",
       [](auto in) {
         Tensor y = exp(in[0]) * 2.0f;
         return std::vector<Tensor>{y, y.sum({-1}) + 1.0f};
       },
       {randn({9, 65})}},
      {"a_reduction_over_leading_axes",
       [](auto in) {
         return std::vector<Tensor>{(in[0] * in[0]).sum({0, 1}) * 3.0f};
       },
       {randn({6, 5, 70})}},
      {"broadcast_and_a_transposed_view",
       [](auto in) { return std::vector<Tensor>{relu(in[0].transpose(0, 1) * in[1] + in[2])}; },
       {randn({40, 30}), randn({30, 1}), randn({40})}},
      {"casts_through_bf16_and_f16",
       [](auto in) {
         Tensor h = (in[0] * 3.0f).to(DType::BF16);
         return std::vector<Tensor>{(h.to(f32) + 1.0f).to(DType::F16) * in[0].to(DType::F16)};
       },
       {randn({50, 20})}},
      {"integers_and_comparisons",
       [](auto in) {
         Tensor k = in[0] * 3 + 7;
         return std::vector<Tensor>{where(k > 10, k, k * 2), amax((k - 3).to(f32), {-1})};
       },
       {randint(-20, 20, {12, 31}, DType::I64)}},
      {"a_full_reduction",
       [](auto in) { return std::vector<Tensor>{(in[0] * 2.0f).exp().sum()}; },
       {randn({100, 300}) * 0.1f}},
      // Many elements into few outputs: reduced in parts, then the parts (CudaGroup::Split),
      // with a shorter last part.
      {"a_split_reduction_over_leading_axes",
       [](auto in) {
         Tensor y = in[0] * in[0];
         return std::vector<Tensor>{y.sum({0}), amax(y, {0}), amin(in[0] + 1.0f, {0})};
       },
       {randn({20011, 3})}},
      // Each op rounds (NVRTC --fmad=false): x * y - mean(x * y) over one element is 0, so
      // its layer_norm is 0 and 1 / it is inf (contracted into an FMA, it was not, on an H200).
      {"layer_norm_of_a_product_over_one_element",
       [](auto in) { return std::vector<Tensor>{1.0f / layer_norm(in[0] * in[1], {1})}; },
       {randn({3, 3, 1}), randn({1, 1})}},
      {"a_split_integer_sum",
       [](auto in) { return std::vector<Tensor>{(in[0] * 3).sum()}; },
       {randint(-1000, 1000, {40009}, DType::I64)}},
  };
}

class CudaTraced : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaTraced, RunsFusedKernelsThatMatchEagerOnTheCpu) {
  REQUIRE_CUDA();
  Program p = programs()[GetParam()];
  SCOPED_TRACE(p.name);
  std::vector<Tensor> want = p.fn(p.inputs);
  std::vector<Tensor> args = on(kGpu, p.inputs);
  jit::Function f = jit::trace_tensors(p.fn, args, p.name);
  std::vector<Tensor> got = f.call(args);
  EXPECT_GE(f.stats().kernels, p.min_kernels) << "the function ran op by op";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].device(), kGpu);
    EXPECT_TRUE(test::close_enough(got[i].to(cpu), want[i])) << "output " << i << ":\n"
                                                             << got[i].to(cpu) << "\nwant\n"
                                                             << want[i];
  }
  // A second call finds its plan and its kernels.
  int64_t before = jit::kernel_cache_stats().compiles;
  std::vector<Tensor> again = f.call(args);
  EXPECT_EQ(jit::kernel_cache_stats().compiles, before);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(test::bitwise_equal(again[i].to(cpu), got[i].to(cpu)));
}

INSTANTIATE_TEST_SUITE_P(Programs, CudaTraced, ::testing::Range<size_t>(0, programs().size()),
                         [](const auto& info) { return programs()[info.param].name; });

TEST(CudaTraced, AnotherBatchSizeReusesTheKernels) {
  REQUIRE_CUDA();
  auto softmax = [](const Tensor& x) {
    Tensor e = exp(x - amax(x, {-1}, true));
    return e / e.sum({-1}, true);
  };
  jit::Function f = jit::trace(softmax, {randn({8, 100}, f32, kGpu)});
  f(randn({8, 100}, f32, kGpu));
  int64_t compiles = jit::kernel_cache_stats().compiles;
  Tensor x = randn({31, 100});
  Tensor got = f(x.to(kGpu));
  EXPECT_EQ(jit::kernel_cache_stats().compiles, compiles);
  EXPECT_EQ(f.stats().traces, 2);
  EXPECT_TRUE(test::close_enough(got.to(cpu), softmax(x)));
}

// Contiguous elementwise kernels move four elements per load and store (kiln_vec4: 16 bytes
// for f32) when every contiguous operand is aligned to them, and finish the last total % 4 one
// at a time; a view at an odd offset runs them all one at a time. Every size, dtype mix and
// offset matches the CPU.
TEST(CudaTraced, ElementwiseKernelsMoveFourElementsAtATime) {
  REQUIRE_CUDA();
  auto fn = [](const Tensor& x, const Tensor& y, const Tensor& s) { return (x * y + s).to(DType::F16) * 2.0f; };
  for (int64_t n : {0, 1, 3, 4, 5, 8, 1027, 70001}) {
    for (int64_t offset : {0, 1, 4}) {
      SCOPED_TRACE(fmt::format("{} elements at offset {}", n, offset));
      Tensor base = randn({n + offset}), y = randn({n}), s = randn({});
      Tensor x = base.slice(0, offset, n + offset);
      Tensor xd = base.to(kGpu).slice(0, offset, n + offset);
      jit::Function f = jit::trace(fn, {xd, y.to(kGpu), s.to(kGpu)});
      Tensor got = f(xd, y.to(kGpu), s.to(kGpu));
      EXPECT_TRUE(test::close_enough(got.to(cpu), fn(x, y, s)));
      // Eagerly, op by op: contiguous operands take a text of their own, which does the same.
      EXPECT_TRUE(test::close_enough(fn(xd, y.to(kGpu), s.to(kGpu)).to(cpu), fn(x, y, s)));
    }
  }
  // Past one dim: four elements of a row at a time, a per-channel operand read once for them,
  // when the rows are a multiple of 4 long and every row starts aligned (a column slice's rows
  // do not: they run one element at a time).
  auto affine = [](const Tensor& x, const Tensor& w) { return relu(x * w + 1.0f); };
  for (int64_t hw : {3, 8, 12}) {
    for (bool sliced : {false, true}) {
      SCOPED_TRACE(fmt::format("rows of {}{}", hw, sliced ? ", a column slice" : ""));
      Tensor base = randn({4, 6, hw + (sliced ? 1 : 0)}), w = randn({1, 6, 1});
      Tensor x = base.slice(2, 0, hw);
      Tensor xd = base.to(kGpu).slice(2, 0, hw);
      jit::Function f = jit::trace(affine, {xd, w.to(kGpu)});
      EXPECT_TRUE(test::close_enough(f(xd, w.to(kGpu)).to(cpu), affine(x, w)));
    }
  }
  // The kernel's text: vector loads of the contiguous operands, the 0-d one read as it is.
  ir::Graph g = ir::parse(
      "graph @f(%0: f32[64]@cuda:0, %1: f16[64]@cuda:0, %2: f32[]@cuda:0) -> (f32[64]@cuda:0) {\n"
      "  %3 = fused %0, %1, %2 : f32[64]@cuda:0 {\n"
      "    %0 = cast $1 {dtype=f32} : f32[64]@cuda:0\n"
      "    %1 = mul $0, %0 : f32[64]@cuda:0\n"
      "    %2 = add %1, $2 : f32[64]@cuda:0\n"
      "    yield %2\n"
      "  }\n"
      "  return %3\n"
      "}\n");
  std::string text = cuda::group_kernel_sources(g.nodes[0], 132)[0];
  EXPECT_NE(text.find("*(const kiln_vec4<float>*)&((float*)a.data[0])"), std::string::npos) << text;
  EXPECT_NE(text.find("*(const kiln_vec4<unsigned short>*)&((unsigned short*)a.data[1])"), std::string::npos) << text;
  EXPECT_EQ(text.find("kiln_vec4<float>*)&((float*)a.data[2])"), std::string::npos) << text;
  EXPECT_NE(text.find("*(kiln_vec4<float>*)&((float*)a.data[3])"), std::string::npos) << text;
}

// A linear layer's bias and relu (or gelu_tanh) after its matmul become one addmm node, a
// GEMM with an epilogue (ir/passes/matmul_epilogue.cpp); an exact gelu stays a kernel after an
// addmm. Forward and gradients match the CPU's eager ones.
TEST(CudaTraced, BiasAndActivationJoinTheMatmul) {
  REQUIRE_CUDA();
  manual_seed(4);
  nn::Linear a1(32, 64), a2(64, 48), a3(48, 10);
  Tensor x = randn({16, 32});
  auto mlp = [&](const Tensor& in) { return a3(gelu(a2(relu(a1(in))), "tanh")); };
  std::vector<Tensor> params{a1.weight, a1.bias, a2.weight, a2.bias, a3.weight, a3.bias};
  Tensor want = mlp(x);
  std::vector<Tensor> want_grads;
  want.sum().backward();
  for (Tensor& p : params) want_grads.push_back(p.grad().clone()), p.zero_grad();
  for (nn::Linear* l : {&a1, &a2, &a3}) l->to(kGpu);
  std::vector<Tensor> gpu_params{a1.weight, a1.bias, a2.weight, a2.bias, a3.weight, a3.bias};
  {
    NoGradGuard inference;  // (training saves gelu's input for its backward: that add stays apart)
    jit::Function f = jit::trace(mlp, {x.to(kGpu)}, "mlp");
    Tensor got = f(x.to(kGpu));
    std::string text = ir::print(f.graph());
    EXPECT_NE(text.find("addmm_relu"), std::string::npos) << text;
    EXPECT_NE(text.find("addmm_gelu_tanh"), std::string::npos) << text;
    EXPECT_TRUE(test::close_enough(got.to(cpu), want));
  }
  // Trained, the partition saves the first two products for the backward (their bias and
  // activation are recomputed there): only the last layer's bias joins its matmul.
  jit::Function f = jit::trace(mlp, {x.to(kGpu)}, "mlp");
  Tensor got = f(x.to(kGpu));
  EXPECT_NE(ir::print(f.graph()).find("= addmm %"), std::string::npos) << ir::print(f.graph());
  EXPECT_TRUE(test::close_enough(got.to(cpu), want));
  got.sum().backward();
  for (size_t k = 0; k < gpu_params.size(); ++k)
    EXPECT_TRUE(test::close_enough(gpu_params[k].grad().to(cpu), want_grads[k])) << "param " << k;
}

// The compiled backward: its groups are CUDA kernels too, and the gradients match the CPU's.
TEST(CudaTraced, TheCompiledBackwardMatchesTheCpu) {
  REQUIRE_CUDA();
  manual_seed(5);
  Tensor x = randn({16, 40}), w = randn({40}), b = randn({40});
  auto loss_of = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor d = x - x.mean({-1}, true);
    Tensor y = d * rsqrt((d * d).mean({-1}, true) + 1e-5f) * w + b;
    return (tanh(y) * y).sum();
  };
  auto grads = [&](Device dev, bool traced) {
    auto leaf = [&](const Tensor& t) { return t.to(dev).detach().requires_grad_(); };
    Tensor xd = leaf(x), wd = leaf(w), bd = leaf(b);
    Tensor loss;
    if (traced) {
      jit::Function f = jit::trace(loss_of, {xd, wd, bd});
      loss = f(xd, wd, bd);
      EXPECT_GE(f.stats().kernels, 1);
    } else {
      loss = loss_of(xd, wd, bd);
    }
    loss.backward();
    return std::vector<Tensor>{loss.detach(), xd.grad(), wd.grad(), bd.grad()};
  };
  std::vector<Tensor> want = grads(cpu, false), got = grads(kGpu, true);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].device(), kGpu);
    EXPECT_TRUE(test::close_enough(got[i].to(cpu), want[i])) << "value " << i;
  }
}

// Eager reductions of many elements into few run in parts too.
TEST(CudaReductions, ManyElementsIntoFewRunInParts) {
  REQUIRE_CUDA();
  manual_seed(9);
  Tensor x = randn({100003}), m = randn({9001, 3});
  // This sum cancels to 0.53 from 10^5 terms of size 1: compare with the double sum within
  // rounding of the terms (1e-6 of sum |x|, about 0.08; a part left out moves it by ~60), not
  // with the CPU's f32 sum relative to the small result (its AVX2 order is 1.5e-4 off).
  double exact = x.to(DType::F64).sum().item<double>(), terms = abs(x).to(DType::F64).sum().item<double>();
  EXPECT_NEAR(x.to(kGpu).sum().to(cpu).item<double>(), exact, 1e-6 * terms);
  EXPECT_TRUE(test::close_enough(amax(x.to(kGpu), {0}).to(cpu), amax(x, {0})));
  EXPECT_TRUE(test::close_enough(m.to(kGpu).sum({0}).to(cpu), m.sum({0})));
  EXPECT_TRUE(test::close_enough(m.to(kGpu).transpose(0, 1).sum({1}).to(cpu), m.transpose(0, 1).sum({1})));
}

// A whole training step traced on CUDA (forward, backward and AdamW's update in one plan) trains
// as the CPU's eager step does.
TEST(CudaTraced, AWholeTrainingStepMatchesTheCpusEagerSteps) {
  REQUIRE_CUDA();
  manual_seed(3);
  nn::Linear a1(20, 32), a2(32, 5);
  nn::Linear b1(20, 32), b2(32, 5);
  b1.load_state_dict(a1.state_dict());
  b2.load_state_dict(a2.state_dict());
  b1.to(kGpu);
  b2.to(kGpu);
  std::vector<Tensor> pa{a1.weight, a1.bias, a2.weight, a2.bias}, pb{b1.weight, b1.bias, b2.weight, b2.bias};
  optim::AdamW oa(pa, 0.01), ob(pb, 0.01);
  auto step = [](nn::Linear& l1, nn::Linear& l2, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(l2(gelu(l1(x))), y);
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor x = randn({64, 20}), y = randint(0, 5, {64}, DType::I64);
  jit::Function traced =
      jit::trace([&](Tensor x, Tensor y) { return step(b1, b2, ob, x, y); }, {x.to(kGpu), y.to(kGpu)}, "step");
  for (int i = 0; i < 5; ++i) {
    Tensor want = step(a1, a2, oa, x, y);
    Tensor got = traced(x.to(kGpu), y.to(kGpu));
    EXPECT_TRUE(test::close_enough(got.to(cpu), want)) << "step " << i;
  }
  EXPECT_GE(traced.stats().kernels, 2);
  for (size_t k = 0; k < pa.size(); ++k) EXPECT_TRUE(test::close_enough(pb[k].to(cpu), pa[k])) << "param " << k;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_cuda_jit_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A forward saved on the CPU runs on CUDA after jit::load(path, device), at any batch size; one
// saved from CUDA tensors loads onto the CPU; LoadedFunction::to moves a loaded one back.
TEST(CudaSavedModules, AForwardSavedOnOneDeviceRunsOnTheOther) {
  REQUIRE_CUDA();
  manual_seed(4);
  examples::DigitsNet net;
  Tensor x = rand({5, 1, 8, 8}), x7 = rand({7, 1, 8, 8});
  Tensor want, want7;
  {
    NoGradGuard g;
    want = net(x);
    want7 = net(x7);
  }
  std::string from_cpu = temp_path("from_cpu.kiln"), from_gpu = temp_path("from_gpu.kiln");
  jit::save_module(net, x, from_cpu, jit::SaveOptions().dynamic(0, 0, "B"));
  jit::LoadedFunction f = jit::load(from_cpu, kGpu);
  for (const auto& [name, p] : f.named_parameters()) EXPECT_EQ(p.device(), kGpu) << name;
  Tensor got = f(x.to(kGpu)), got7 = f(x7.to(kGpu));
  EXPECT_EQ(got.device(), kGpu);
  EXPECT_TRUE(test::close_enough(got.to(cpu), want));
  EXPECT_TRUE(test::close_enough(got7.to(cpu), want7));
  EXPECT_GE(f.stats().kernels, 1);
  f.to(cpu);
  EXPECT_TRUE(test::close_enough(f(x), want));
  test::expect_error([&] { f(x.to(kGpu)); }, {"cuda:0"});

  net.to(kGpu);
  jit::save_module(net, x.to(kGpu), from_gpu, jit::SaveOptions().dynamic(0, 0, "B"));
  jit::LoadedFunction g = jit::load(from_gpu);
  EXPECT_TRUE(test::close_enough(g(x7), want7));
  std::filesystem::remove(from_cpu);
  std::filesystem::remove(from_gpu);
}

// A whole training step saved on the CPU trains on CUDA as it does on the CPU.
TEST(CudaSavedModules, ASavedTrainingStepTrainsOnCuda) {
  REQUIRE_CUDA();
  manual_seed(8);
  nn::Linear l1(6, 8), l2(8, 3);
  optim::Adam opt({l1.weight, l1.bias, l2.weight, l2.bias}, 0.05);
  Tensor x = randn({16, 6}), y = randint(0, 3, {16}, DType::I64);
  jit::Function step = jit::trace(
      [&](Tensor x, Tensor y) {
        opt.zero_grad();
        Tensor loss = cross_entropy(l2(relu(l1(x))), y);
        loss.backward();
        opt.step();
        return loss;
      },
      {x, y});
  std::string path = temp_path("step.kiln");
  jit::save(step, path);
  jit::LoadedFunction on_cpu = jit::load(path), on_gpu = jit::load(path, kGpu);
  for (int i = 0; i < 4; ++i) {
    Tensor a = on_cpu(x, y), b = on_gpu(x.to(kGpu), y.to(kGpu));
    EXPECT_TRUE(test::close_enough(b.to(cpu), a)) << "step " << i;
  }
  auto pa = on_cpu.named_parameters(), pb = on_gpu.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t k = 0; k < pa.size(); ++k) {
    EXPECT_EQ(pb[k].second.device(), kGpu) << pa[k].first;
    EXPECT_TRUE(test::close_enough(pb[k].second.to(cpu), pa[k].second)) << pa[k].first;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kiln
