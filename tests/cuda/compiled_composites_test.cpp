// tests/cuda/compiled_composites_test.cpp -- eager composites on CUDA as compiled functions
// (runtime/composite_fusion.h): softmax, log_softmax, logsumexp, layer_norm, batch_norm,
// group_norm, rms_norm, cross_entropy, mse_loss and binary_cross_entropy_with_logits against
// the CPU's op-by-op composites, values and gradients, on contiguous and strided inputs; the
// launches they save; gradients of gradients through their differentiable fallback; linear as
// one addmm; and what keeps them op by op.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cuda/libraries.h"
#include "jit/tracer.h"
#include "runtime/composite_fusion.h"
#include "runtime/cuda_internal.h"
#include "tests/cuda/cuda_test.h"
#include "tests/ops/reference.h"

namespace kiln {
namespace {

using test::kGpu;

// A composite under test: its key (what jit::composite_stats reads) and its call on the
// inputs (the first is the one with a batch; the rest are parameters, or a target).
struct Case {
  std::string name, key;
  std::vector<Tensor> inputs;        // on the CPU
  std::vector<char> differentiable;  // per input
  std::function<Tensor(std::span<const Tensor>)> fn;
};

// `width` classes or features per row (at least 8).
std::vector<Case> cases(int64_t width, bool small_image) {
  manual_seed(3);
  Tensor rows = randn({6, width}) * 3.0;
  Tensor image = randn(small_image ? Dims{2, 6, 2, 2} : Dims{4, 6, 5, 3}) + 2.0;
  Tensor strided = randn({width, 6}).t();  // [6, width], not contiguous
  Tensor target = from_vector(std::vector<int64_t>{3, 0, width - 1, -100, 7, 7});
  auto flag = [](std::initializer_list<int> v) { return std::vector<char>(v.begin(), v.end()); };
  return {
      {"softmax last", "softmax dim=1", {rows}, flag({1}), [](auto in) { return softmax(in[0], -1); }},
      {"softmax strided", "softmax dim=1", {strided}, flag({1}), [](auto in) { return softmax(in[0], 1); }},
      {"softmax dim 0", "softmax dim=0", {rows}, flag({1}), [](auto in) { return softmax(in[0], 0); }},
      // The same key for another rank: the body reads the dim wrapped.
      {"softmax dim -2 of rank 3", "softmax dim=1", {image[0]}, flag({1}), [](auto in) { return softmax(in[0], -2); }},
      {"log_softmax", "log_softmax dim=1", {rows}, flag({1}), [](auto in) { return log_softmax(in[0], 1); }},
      {"layer_norm affine",
       "layer_norm k=1 eps=1e-05 weight=true bias=true",
       {rows, randn({width}), randn({width})},
       flag({1, 1, 1}),
       [width](auto in) { return layer_norm(in[0], {width}, in[1], in[2]); }},
      {"layer_norm plain",
       "layer_norm k=1 eps=1e-05 weight=false bias=false",
       {strided},
       flag({1}),
       [width](auto in) { return layer_norm(in[0], {width}); }},
      {"batch_norm",
       "batch_norm training=true eps=1e-05 weight=true bias=true running=false",
       {image, randn({6}), randn({6})},
       flag({1, 1, 1}),
       [](auto in) { return nn::batch_norm(in[0], {}, {}, in[1], in[2], true); }},
      {"group_norm",
       "group_norm groups=3 eps=1e-05 weight=true bias=true",
       {image, randn({6}), randn({6})},
       flag({1, 1, 1}),
       [](auto in) { return nn::group_norm(in[0], 3, in[1], in[2]); }},
      {"group_norm, another batch",
       "group_norm groups=3 eps=1e-05 weight=true bias=true",
       {image.slice(0, 0, 1), randn({6}), randn({6})},
       flag({1, 1, 1}),
       [](auto in) { return nn::group_norm(in[0], 3, in[1], in[2]); }},
      {"rms_norm",
       "rms_norm dims=[1] eps=1.1920928955078125e-07 weight=true",
       {rows, randn({width})},
       flag({1, 1}),
       [width](auto in) { return nn::rms_norm(in[0], {width}, in[1]); }},
      {"cross_entropy",
       "cross_entropy reduction=1 label_smoothing=0.1 ignore_index=-100",
       {rows, target},
       flag({1, 0}),
       [](auto in) { return cross_entropy(in[0], in[1], Reduction::Mean, 0.1); }},
      {"logsumexp",
       "logsumexp rank=4 dims=[-1,1] keepdim=false",
       {image},
       flag({1}),
       [](auto in) {
         return logsumexp(in[0], {-1, 1}, false);
       }},
      {"mse_loss",
       "mse_loss reduction=2",
       {rows, strided},
       flag({1, 1}),
       [](auto in) { return mse_loss(in[0], in[1], Reduction::Sum); }},
      {"binary_cross_entropy_with_logits",
       "binary_cross_entropy_with_logits reduction=1 pos_weight=true",
       {rows, rand({6, width}), rand({width}) * 3.0},
       flag({1, 1, 1}),
       [](auto in) { return binary_cross_entropy_with_logits(in[0], in[1], Reduction::Mean, in[2]); }},
  };
}

// The inputs on `d`, the differentiable ones requiring grad.
std::vector<Tensor> place(const Case& c, Device d) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor x = c.inputs[i].is_contiguous() ? c.inputs[i].to(d).detach() : c.inputs[i].t().to(d).detach().t();
    in.push_back(c.differentiable[i] ? x.requires_grad_() : x);
  }
  return in;
}

TEST(EagerComposites, MatchTheCpuValuesAndGradients) {
  REQUIRE_CUDA();
  for (const Case& c : cases(40, false)) {
    SCOPED_TRACE(c.name);
    int64_t before = jit::composite_stats(c.key).hits + jit::composite_stats(c.key).misses;
    std::vector<Tensor> cpu_in = place(c, cpu), gpu_in = place(c, kGpu);
    EXPECT_EQ(gpu_in[0].is_contiguous(), c.inputs[0].is_contiguous());
    Tensor want = c.fn(cpu_in), got = c.fn(gpu_in);
    EXPECT_EQ(jit::composite_stats(c.key).hits + jit::composite_stats(c.key).misses, before + 1)
        << "the CUDA call did not run as the compiled composite " << c.key;
    EXPECT_TRUE(test::all_close(got.to(cpu), want.to_vector<double>(), want.shape(), {1e-4, 1e-5}));
    Tensor gy = randn(want.shape());
    want.backward(gy);
    got.backward(gy.to(kGpu));
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      if (!c.differentiable[i]) continue;
      SCOPED_TRACE("gradient of input " + std::to_string(i));
      ASSERT_TRUE(gpu_in[i].grad().defined());
      EXPECT_TRUE(test::all_close(gpu_in[i].grad().to(cpu), cpu_in[i].grad().to_vector<double>(), cpu_in[i].shape(),
                                  {1e-4, 1e-5}));
    }
  }
}

TEST(EagerComposites, BatchNormUpdatesRunningStatisticsAsTheCpu) {
  REQUIRE_CUDA();
  manual_seed(5);
  nn::BatchNorm2d cpu_bn(6), cpu_avg(6, {.momentum = std::nullopt});
  nn::BatchNorm2d gpu_bn(6), gpu_avg(6, {.momentum = std::nullopt});
  gpu_bn.to(kGpu);
  gpu_avg.to(kGpu);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({4, 6, 3, 3}) * 2.0 + 1.0, g = randn({4, 6, 3, 3});
    for (nn::BatchNorm2d* m : {&cpu_bn, &cpu_avg}) m->forward(x).backward(g);
    // The node keeps the running statistics it was given, updated in place since: its
    // backward reads them only under create_graph, so checks their versions only then.
    for (nn::BatchNorm2d* m : {&gpu_bn, &gpu_avg}) m->forward(x.to(kGpu)).backward(g.to(kGpu));
  }
  for (auto [cpu_m, gpu_m] : {std::pair{&cpu_bn, &gpu_bn}, std::pair{&cpu_avg, &gpu_avg}}) {
    EXPECT_TRUE(
        test::all_close(gpu_m->weight.grad().to(cpu), cpu_m->weight.grad().to_vector<double>(), {6}, {1e-4, 1e-5}));
    EXPECT_TRUE(
        test::all_close(gpu_m->running_mean.to(cpu), cpu_m->running_mean.to_vector<double>(), {6}, {1e-5, 1e-6}));
    EXPECT_TRUE(test::all_close(gpu_m->running_var.to(cpu), cpu_m->running_var.to_vector<double>(), {6}, {1e-5, 1e-6}));
  }
  // Evaluation reads them, compiled as well.
  cpu_bn.eval();
  gpu_bn.eval();
  Tensor x = randn({2, 6, 3, 3});
  Tensor want = cpu_bn.forward(x);
  EXPECT_TRUE(
      test::all_close(gpu_bn.forward(x.to(kGpu)).to(cpu), want.to_vector<double>(), want.shape(), {1e-5, 1e-6}));
  EXPECT_GT(jit::composite_stats("batch_norm training=false eps=1e-05 weight=true bias=true running=true").hits +
                jit::composite_stats("batch_norm training=false eps=1e-05 weight=true bias=true running=true").misses,
            0);
}

// Kernels kiln launches for each pass of a composite, after a first call has compiled it:
// the forward, then the backward from a seed gradient (the inputs' gradients cleared first, so
// none is an accumulation).
struct Passes {
  int64_t forward = 0, backward = 0;
};
Passes launches(const std::function<Tensor()>& f, const Tensor& seed, std::vector<Tensor> inputs) {
  Passes p;
  for (int run = 0; run < 2; ++run) {
    for (Tensor& t : inputs) t.set_grad({});
    cuda::synchronize();
    int64_t start = cuda::kernel_launches();
    Tensor y = f();
    int64_t middle = cuda::kernel_launches();
    if (seed.defined()) y.backward(seed);
    else y.backward();
    cuda::synchronize();
    p = {middle - start, cuda::kernel_launches() - middle};
  }
  return p;
}

TEST(EagerComposites, LaunchAKernelPerPass) {
  REQUIRE_CUDA();
  manual_seed(1);
  Tensor x = randn({64, 1000}).to(kGpu).requires_grad_();
  Tensor w = randn({1000}).to(kGpu).requires_grad_(), b = randn({1000}).to(kGpu).requires_grad_();
  Tensor image = randn({8, 16, 7, 7}).to(kGpu).requires_grad_();
  Tensor cw = randn({16}).to(kGpu).requires_grad_(), cb = randn({16}).to(kGpu).requires_grad_();
  Tensor target = randint(0, 1000, {64}).to(kGpu);
  Tensor dx = randn({64, 1000}).to(kGpu), dimage = randn({8, 16, 7, 7}).to(kGpu);
  struct Row {
    const char* name;
    std::function<Tensor()> f;
    Tensor seed;  // undefined: a scalar loss
    std::vector<Tensor> inputs;
    Passes most;  // launches compiled as of 2026-11-28: a regression guard
  };
  // Where a pass takes more than one kernel: batch norm's and group norm's statistics must be
  // complete before any element is normalized (two launches, as PyTorch's); layer_norm's and
  // group_norm's weight and bias gradients reduce over the rows their input gradient keeps, and
  // a small kernel of their per-row statistics is read after the input gradient's row sums
  // (recomputation reaches full-size readers only); cross_entropy's target
  // logits are a gather, and its backward a scatter of the targets' weights, each beside small
  // index and scale kernels.
  std::vector<Row> rows = {
      {"softmax", [&] { return softmax(x, 1); }, dx, {x}, {1, 1}},
      {"log_softmax", [&] { return log_softmax(x, 1); }, dx, {x}, {1, 1}},
      {"layer_norm", [&] { return layer_norm(x, {1000}, w, b); }, dx, {x, w, b}, {1, 3}},
      {"batch_norm", [&] { return nn::batch_norm(image, {}, {}, cw, cb, true); }, dimage, {image, cw, cb}, {2, 2}},
      {"group_norm", [&] { return nn::group_norm(image, 4, cw, cb); }, dimage, {image, cw, cb}, {2, 4}},
      {"cross_entropy", [&] { return cross_entropy(x, target); }, Tensor(), {x}, {4, 5}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    Passes fused = launches(r.f, r.seed, r.inputs);
    jit::set_fusion_enabled(false);
    Passes unfused = launches(r.f, r.seed, r.inputs);
    jit::set_fusion_enabled(true);
    std::cout << r.name << ": " << fused.forward << " + " << fused.backward << " launches compiled (forward + "
              << "backward), " << unfused.forward << " + " << unfused.backward << " op by op" << std::endl;
    EXPECT_LE(fused.forward, r.most.forward);
    EXPECT_LE(fused.backward, r.most.backward);
    EXPECT_LE(2 * (fused.forward + fused.backward), unfused.forward + unfused.backward);
  }
}

// Batch norm in training, at a size whose per-channel sums are cut across blocks: the forward
// is the statistics' group and the normalization's (the per-channel mean and 1/sqrt(var + eps)
// recomputed inside it), the backward the four sums' group (sum(dy) beside the others) and the
// input gradient's. The last block of the sums' kernel combines their partial results: two
// launches each way.
TEST(EagerComposites, BatchNormIsTwoGroupsEachWay) {
  REQUIRE_CUDA();
  manual_seed(8);
  Tensor image = randn({32, 3, 32, 32}).to(kGpu).requires_grad_();
  Tensor w = randn({3}).to(kGpu).requires_grad_(), b = randn({3}).to(kGpu).requires_grad_();
  Tensor dy = randn({32, 3, 32, 32}).to(kGpu);
  auto step = [&](int64_t* forward, int64_t* backward) {
    int64_t start = cuda::kernel_launches();
    Tensor y = nn::batch_norm(image, {}, {}, w, b, true);
    int64_t middle = cuda::kernel_launches();
    y.backward(dy);
    *forward = middle - start;
    *backward = cuda::kernel_launches() - middle;
  };
  int64_t f = 0, bw = 0;
  step(&f, &bw);                                       // compiles
  image.set_grad({}), w.set_grad({}), b.set_grad({});  // (else the second adds to them)
  step(&f, &bw);
  std::cout << "batch_norm [32, 3, 32, 32]: " << f << " launches forward, " << bw << " backward" << std::endl;
  EXPECT_LE(f, 2);  // the statistics (their parts combined by the kernel's last block), then y
  EXPECT_LE(bw, 2);
}

// linear with a bias, eagerly on CUDA, is one addmm (cuBLASLt's GEMM with a bias epilogue):
// the composite's values and gradients, on a 3-d strided input and under autocast.
TEST(EagerComposites, LinearIsOneAddmm) {
  REQUIRE_CUDA();
  manual_seed(6);
  Tensor x = randn({5, 3, 7}).transpose(0, 1), w = randn({4, 7}), b = randn({4});
  std::vector<Tensor> cpu_in{x.detach().requires_grad_(), w.detach().requires_grad_(), b.detach().requires_grad_()};
  std::vector<Tensor> gpu_in{x.to(kGpu).detach().requires_grad_(), w.to(kGpu).detach().requires_grad_(),
                             b.to(kGpu).detach().requires_grad_()};
  cuda::EpilogueStats before = cuda::epilogue_stats();
  Tensor got = linear(gpu_in[0], gpu_in[1], gpu_in[2]);
  cuda::EpilogueStats after = cuda::epilogue_stats();
  EXPECT_EQ(after.fused + after.declined, before.fused + before.declined + 1) << "not one addmm";
  Tensor want = linear(cpu_in[0], cpu_in[1], cpu_in[2]);
  EXPECT_TRUE(test::all_close(got.to(cpu), want.to_vector<double>(), want.shape(), {1e-5, 1e-5}));
  Tensor g = randn(want.shape());
  want.backward(g);
  got.backward(g.to(kGpu));
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(test::all_close(gpu_in[i].grad().to(cpu), cpu_in[i].grad().to_vector<double>(), cpu_in[i].shape(),
                                {1e-5, 1e-5}));
  AutocastGuard autocast(DType::BF16);
  Tensor low = linear(gpu_in[0], gpu_in[1], gpu_in[2]);
  EXPECT_EQ(low.dtype(), DType::BF16);
  EXPECT_TRUE(test::all_close(low.to(cpu), linear(cpu_in[0], cpu_in[1], cpu_in[2]).to_vector<double>(), want.shape(),
                              {1e-2, 1e-2}));
}

// What a forward keeps for its backward, in device bytes beyond its result: the compiled
// composite keeps its arguments (live anyway) and per-row statistics; op by op, each primitive
// keeps what its own rule needs (the centered input, the normalized one, ...).
TEST(EagerComposites, KeepLittleForTheBackward) {
  REQUIRE_CUDA();
  manual_seed(4);
  Tensor x = randn({256, 1024}).to(kGpu).requires_grad_();
  Tensor w = randn({1024}).to(kGpu).requires_grad_(), b = randn({1024}).to(kGpu).requires_grad_();
  Tensor target = randint(0, 1024, {256}).to(kGpu);
  auto kept = [](const std::function<Tensor()>& f) {
    cuda::synchronize();
    int64_t before = cuda::memory_stats().in_use;
    Tensor y = f();
    cuda::synchronize();
    int64_t bytes = cuda::memory_stats().in_use - before - y.numel() * static_cast<int64_t>(dtype_size(y.dtype()));
    y.backward(ones(y.shape()).to(kGpu));
    return bytes;
  };
  struct Row {
    const char* name;
    std::function<Tensor()> f;
  };
  const Row rows[] = {
      {"softmax", [&] { return softmax(x, 1); }},
      {"layer_norm", [&] { return layer_norm(x, {1024}, w, b); }},
      {"cross_entropy", [&] { return cross_entropy(x, target); }},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    kept(r.f);  // compiles
    int64_t fused = kept(r.f);
    jit::set_fusion_enabled(false);
    int64_t unfused = kept(r.f);
    jit::set_fusion_enabled(true);
    std::cout << r.name << ": keeps " << fused << " bytes compiled, " << unfused << " op by op (input " << x.numel() * 4
              << ")" << std::endl;
    EXPECT_LE(fused, 16 * 1024);  // statistics per row
    EXPECT_GE(unfused, x.numel() * 4);
  }
}

// Gradients of gradients: the compiled node's backward with create_graph runs its body op by
// op and records it, so the second derivative is checked by finite differences (in f64; the
// inputs that take no gradient, cross_entropy's target, are held fixed).
TEST(EagerComposites, GradientsOfGradientsThroughTheFallback) {
  REQUIRE_CUDA();
  std::set<std::string> ops;  // one case per op: the fallback is the same for every variant
  for (const Case& c : cases(8, true)) {
    if (!ops.insert(c.key.substr(0, c.key.find(' '))).second) continue;
    SCOPED_TRACE(c.name);
    std::vector<Tensor> in;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (c.differentiable[i]) in.push_back(c.inputs[i].to(DType::F64).detach().requires_grad_());
    auto first = [&](std::span<const Tensor> a) {
      std::vector<Tensor> args, wrt;
      for (size_t i = 0, k = 0; i < c.inputs.size(); ++i) {
        args.push_back((c.differentiable[i] ? a[k++] : c.inputs[i]).to(kGpu));
        if (c.differentiable[i]) wrt.push_back(args.back());
      }
      Tensor y = c.fn(args);
      Tensor v = cos(arange(0, y.numel(), 1, DType::F64).reshape(y.shape())).to(kGpu);  // a fixed projection
      std::vector<Tensor> g = autograd::grad(std::vector<Tensor>{y}, wrt, std::vector<Tensor>{v}, true, true);
      Tensor total = zeros({}, DType::F64).to(kGpu);
      for (const Tensor& gi : g) total = total + (gi * gi).sum();
      return total.to(cpu);
    };
    EXPECT_EQ(autograd::gradcheck(first, in, {.eps = 1e-6, .atol = 1e-6, .rtol = 1e-4}), "");
  }
}

TEST(EagerComposites, OpByOpWhereTheyMustBe) {
  REQUIRE_CUDA();
  Tensor x = randn({5, 9}).to(kGpu);
  // While a trace records, the trace sees the primitives.
  jit::Function f = jit::trace([](Tensor a) { return softmax(a, 1); }, {x});
  bool exp_seen = false;
  for (const ir::Node& n : f.graph().nodes)
    if (n.kind == ir::NodeKind::Fused)
      for (const ir::Node& m : n.body->nodes) exp_seen = exp_seen || (m.kind == ir::NodeKind::Op && m.op == OpId::Exp);
  EXPECT_TRUE(exp_seen);
  EXPECT_TRUE(test::all_close(f(x).to(cpu), softmax(x.to(cpu), 1).to_vector<double>(), {5, 9}, {1e-5, 1e-6}));
  // With fusion off, inside CompositeFusionOff, on a size-0 tensor and on the CPU: op by op.
  std::vector<Tensor> args{x};
  EXPECT_TRUE(composite_fuses(args));
  {
    CompositeFusionOff off;
    EXPECT_FALSE(composite_fuses(args));
  }
  jit::set_fusion_enabled(false);
  EXPECT_FALSE(composite_fuses(args));
  jit::set_fusion_enabled(true);
  std::vector<Tensor> empty{zeros({0, 9}).to(kGpu)}, host{randn({5, 9})};
  EXPECT_FALSE(composite_fuses(empty));
  EXPECT_FALSE(composite_fuses(host));
  EXPECT_EQ(softmax(empty[0], 1).shape(), (Dims{0, 9}));
  // Under autocast the composite widens first, as on the CPU: f32 out of a bf16 input.
  AutocastGuard autocast(DType::BF16);
  Tensor low = randn({5, 9}).to(DType::BF16);
  Tensor got = softmax(low.to(kGpu), 1);
  EXPECT_EQ(got.dtype(), DType::F32);
  EXPECT_TRUE(test::all_close(got.to(cpu), softmax(low, 1).to_vector<double>(), {5, 9}, {1e-6, 1e-7}));
}

}  // namespace
}  // namespace kiln
