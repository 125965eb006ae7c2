// tests/jit/fused_test.cpp -- fused kernels: results against eager on the shapes and dtypes
// fusion handles (broadcasts, strided views, reductions over any axes, casts), kernels compiled
// once per structure across sizes, plans shared by threads without blocking on compiles,
// the memory plan, and the accuracy of the kernels' own tanh.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "codegen/backend.h"
#include "ir/passes.h"
#include "jit/executable.h"
#include "jit/kernel_cache.h"
#include "jit/run.h"
#include "jit_test_util.h"
#include "runtime/log.h"

namespace kiln {
namespace {

// Runs fn eagerly and traced (fused kernels on) on `inputs`, expects close results and that
// the plan has at least `kernels` fused kernels.
template <class F> void expect_fused_matches(F fn, std::vector<Tensor> inputs, size_t kernels = 1) {
  jit::KernelCacheStats before = jit::kernel_cache_stats();
  jit::Function f = jit::trace_tensors(
      [fn](std::span<const Tensor> in) { return std::vector<Tensor>{fn(std::vector<Tensor>(in.begin(), in.end()))}; },
      inputs);
  Tensor want = fn(inputs);
  Tensor got = f.call(inputs)[0];  // the first call loads the plan's kernels
  jit::KernelCacheStats after = jit::kernel_cache_stats();
  EXPECT_GE(static_cast<size_t>(after.hits + after.misses - before.hits - before.misses), kernels)
      << "the plan calls fewer fused kernels than expected";
  EXPECT_TRUE(test::close_enough(got, want)) << "got\n" << got << "\nwant\n" << want;
}

class Fused : public testing::Test {
 protected:
  void SetUp() override {
    was_ = jit::fusion_enabled();
    jit::set_fusion_enabled(true);
    manual_seed(11);
  }
  void TearDown() override { jit::set_fusion_enabled(was_); }
  bool was_ = true;
};

TEST_F(Fused, SoftmaxAndLayerNormFromPrimitives) {
  NoGradGuard no_grad;
  auto softmax_p = [](std::vector<Tensor> in) {
    Tensor m = amax(in[0], {-1}, true);
    Tensor e = exp(in[0] - m);
    return e / e.sum({-1}, true);
  };
  expect_fused_matches(softmax_p, {randn({37, 129})});
  auto layer_norm_p = [](std::vector<Tensor> in) {
    Tensor mu = in[0].mean({-1}, true);
    Tensor d = in[0] - mu;
    Tensor var = (d * d).mean({-1}, true);
    return d * rsqrt(var + 1e-5) * in[1] + in[2];
  };
  expect_fused_matches(layer_norm_p, {randn({33, 70}), randn({70}), randn({70})});
}

TEST_F(Fused, BroadcastsAndStridedViewsAreReadInPlace) {
  NoGradGuard no_grad;
  Tensor base = randn({12, 9});
  auto fn = [](std::vector<Tensor> in) { return exp(in[0]) * in[1] + tanh(in[2]); };
  // A transposed operand, a row vector and a column vector.
  expect_fused_matches(fn, {base.t(), randn({12}), randn({9, 1})});
  // Every other column of a wider tensor.
  expect_fused_matches(fn, {randn({9, 24}).slice(1, 0, 24, 2), randn({9, 12}), randn({12})});
  // An expanded (stride 0) operand.
  expect_fused_matches(fn, {randn({1, 12}).expand({9, 12}), randn({9, 12}), randn({9, 12})});
}

TEST_F(Fused, ReductionsOverLeadingMiddleAndAllAxes) {
  NoGradGuard no_grad;
  Tensor x = randn({6, 7, 8});
  expect_fused_matches([](std::vector<Tensor> in) { return (in[0] * in[0] + 1).sum({0}); }, {x});
  expect_fused_matches([](std::vector<Tensor> in) { return amax(exp(in[0]) * 2, {1}, true); }, {x});
  expect_fused_matches([](std::vector<Tensor> in) { return (in[0] * 3 - 1).sum(); }, {x});
  expect_fused_matches([](std::vector<Tensor> in) { return amin(in[0] * -2 + 1, {1, 2}); }, {x});
  expect_fused_matches([](std::vector<Tensor> in) { return prod(sigmoid(in[0]) * 2, {2}, true); }, {x});
}

// Reductions with few outputs over many elements reduce runs of the reduced dim on every
// thread into partials combined in run order: close to eager, and the same bits on any number
// of threads.
TEST_F(Fused, LongReductionsWithFewOutputsSplitDeterministically) {
  NoGradGuard no_grad;
  struct Case {
    Tensor x;
    Tensor (*fn)(const Tensor&);
  };
  const Case cases[] = {
      {randn({1 << 20}), [](const Tensor& x) { return (x * x + 1).sum(); }},
      {randn({300, 1000}), [](const Tensor& x) { return amax(exp(x) * 2); }},
      {randn({200000, 3}), [](const Tensor& x) { return (x * 3 - 1).sum({0}); }},
      {randn({5, 100000}), [](const Tensor& x) { return amin(x * -2 + 1, {1}, true); }},
      {randn({2, 70000, 3}).transpose(0, 2),
       [](const Tensor& x) {
         return (x * 0.5).sum({1, 2});
       }},
      {randint(-3, 4, {1 << 18}, DType::I32), [](const Tensor& x) { return (x * x).sum(); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.type().str());
    auto fn = c.fn;
    std::vector<Tensor> got;
    for (int threads : {1, 2, 3}) {
      int saved = num_threads();
      set_num_threads(threads);
      std::vector<Tensor> args{c.x};
      jit::Function f =
          jit::trace_tensors([fn](std::span<const Tensor> in) { return std::vector<Tensor>{fn(in[0])}; }, args);
      got.push_back(f.call(args)[0]);
      set_num_threads(saved);
    }
    EXPECT_TRUE(test::close_enough(got[0], fn(c.x))) << got[0] << fn(c.x);
    for (size_t i = 1; i < got.size(); ++i) EXPECT_TRUE(test::bitwise_equal(got[i], got[0])) << i + 1 << " threads";
  }
  // The cut comes from the shape alone: 2^20 elements in runs of 2^15.
  std::vector<Tensor> args{cases[0].x};
  jit::Function f = jit::trace_tensors(
      [](std::span<const Tensor> in) { return std::vector<Tensor>{(in[0] * in[0] + 1).sum()}; }, args);
  const ir::Graph& g = f.graph();
  auto group =
      std::find_if(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return n.kind == ir::NodeKind::Fused; });
  ASSERT_NE(group, g.nodes.end());
  Dims shape = cases[0].x.shape(), strides = cases[0].x.strides();
  jit::KernelArgs a = jit::kernel_args(*group, std::span<const Dims>(&shape, 1), std::span<const Dims>(&strides, 1));
  EXPECT_EQ(a.split_dim, 0);
  EXPECT_EQ(a.runs, 32);
  EXPECT_EQ(a.combine, std::vector<OpId>{OpId::Sum});
}

TEST_F(Fused, IntegersBoolsAndCasts) {
  NoGradGuard no_grad;
  Tensor i = randint(-5, 5, {10, 11}, i32), b = randint(0, 2, {11}, i64).to(DType::Bool);
  // Integer arithmetic, an integer sum (accumulated in i64), a comparison and where.
  expect_fused_matches([](std::vector<Tensor> in) { return (in[0] * in[0] + 3).sum({1}); }, {i});
  expect_fused_matches([](std::vector<Tensor> in) { return where(in[1], in[0] * 2, in[0] - 1); }, {i, b});
  // bool arithmetic stays 0 or 1 (true + true is true), as in eager mode.
  expect_fused_matches([](std::vector<Tensor> in) { return (in[0] + in[0]) * in[0] + (in[0] > 0.5); },
                       {b.reshape({1, 11}).expand({10, 11}).contiguous()});
  expect_fused_matches([](std::vector<Tensor> in) { return (in[0].to(f32) * 0.5 + 1) > 1.0; }, {i});
  expect_fused_matches([](std::vector<Tensor> in) { return (exp(in[0]) + 1).to(f64) * 3; }, {randn({5, 4})});
  expect_fused_matches([](std::vector<Tensor> in) { return (in[0] * 1.5 + 0.5).to(i64) * 2; }, {randn({5, 4})});
}

// Float to integer casts give eager's answers for every value: toward zero, saturating at the
// target's ends, NaN to 0 (a plain fptosi would be poison: u8 of 300.0 came out 44). Integer
// literals past 2^53 keep every bit.
TEST_F(Fused, CastsAndIntegerLiteralsGiveEagersAnswers) {
  NoGradGuard no_grad;
  std::vector<double> v = {NAN,   INFINITY, -INFINITY, 300.0, -5.0,         255.9,         -0.9,   0.9,     1e10,
                           -1e10, 2.5,      -2.5,      127.5, 2147483647.0, -2147483649.0, 9.3e18, -9.3e18, 65535.0};
  for (DType from : {f32, f64}) {
    Tensor x = from_vector<double>(v, {3, 6}).to(from);
    for (DType to : {u8, i32, i64}) {
      SCOPED_TRACE(fmt::format("{} to {}", dtype_name(from), dtype_name(to)));
      expect_fused_matches([to](std::vector<Tensor> in) { return (in[0] * 2.0).to(to); }, {x});
    }
  }
  // Every pair of the dtypes fused kernels take (runtime/dtype.h's CastKind, each case).
  Tensor mixed =
      from_vector<double>({0.0, -0.0, 1.0, -1.0, 3.7, -200.5, 1e6, NAN, 255.0, 256.0, -129.0, 65.25}, {2, 6});
  for (DType from : {f32, f64, i32, i64, u8, boolean}) {
    Tensor x = mixed.to(from);
    for (DType to : {f32, f64, i32, i64, u8, boolean}) {
      SCOPED_TRACE(fmt::format("{} to {} ({})", dtype_name(from), dtype_name(to), int(cast_kind(from, to))));
      expect_fused_matches([to](std::vector<Tensor> in) { return (in[0] + in[0]).to(to) + (in[0]).to(to); }, {x});
    }
  }
  Tensor big = from_vector<int64_t>({0, 1, -3, int64_t{1} << 60}, {2, 2});
  const int64_t k = (int64_t{1} << 53) + 1;
  expect_fused_matches([=](std::vector<Tensor> in) { return (in[0] + k) * 3 - k; }, {big});
  expect_fused_matches([=](std::vector<Tensor> in) { return in[0] * 2 + full({2, 2}, k, i64); }, {big});
}

TEST_F(Fused, EmptyTensors) {
  NoGradGuard no_grad;
  expect_fused_matches([](std::vector<Tensor> in) { return exp(in[0]) * 2 + 1; }, {randn({0, 5})}, 0);
  expect_fused_matches([](std::vector<Tensor> in) { return (in[0] * 2).sum({1}, true) + 1; }, {randn({3, 0})}, 0);
}

TEST_F(Fused, SpecialValuesPropagate) {
  NoGradGuard no_grad;
  Tensor x = from_vector<float>({0.f, -0.f, INFINITY, -INFINITY, NAN, 1e-30f, -1e30f, 88.f, -100.f, 3.f}, {2, 5});
  expect_fused_matches([](std::vector<Tensor> in) { return tanh(in[0]) * 2 + exp(in[0]) * 0.5; }, {x});
  expect_fused_matches([](std::vector<Tensor> in) { return amax(in[0] * 2, {1}, true) + sqrt(in[0] * in[0]); }, {x});
  expect_fused_matches([](std::vector<Tensor> in) { return maximum(in[0], in[0] * 0.5) + relu(in[0]); }, {x});
}

// |got - want| in units in the last place of the float nearest want (subnormals too).
double ulp_error(float got, double want) {
  float w = std::fabs(static_cast<float>(want));
  return std::fabs(got - want) / (std::nextafter(w, INFINITY) - w);
}

// The kernels compute f32 tanh from exp (codegen/llvm/math.cpp): its error, in units in the last
// place against a double reference, over a dense sweep and the special values.
TEST_F(Fused, TanhIsWithinTwoUlps) {
  NoGradGuard no_grad;
  std::vector<float> xs;
  for (double v = -12; v <= 12; v += 1.0 / 4096) xs.push_back(static_cast<float>(v));
  for (float v : {1e-30f, -1e-30f, 1e-8f, 0.6249f, 0.625f, 0.6251f, 9.01f, 44.f, 1e30f}) xs.push_back(v);
  Tensor x = from_vector<float>(xs);
  jit::Function f = jit::trace([](Tensor t) { return tanh(t) * 2.0; }, {x});
  std::vector<float> got = f(x).to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    worst = std::max(worst, ulp_error(got[i], 2.0 * std::tanh(static_cast<double>(xs[i]))));
  }
  EXPECT_LE(worst, 2.0);
  std::printf("fused tanh: worst error %.2f ulp over %zu values\n", worst, xs.size());
}

// The kernels compute f32 erf inline (codegen/llvm/math.cpp): within 2 ULP of a double
// reference over a dense sweep, both pieces' ends and the special values.
TEST_F(Fused, ErfIsWithinTwoUlps) {
  NoGradGuard no_grad;
  std::vector<float> xs;
  for (double v = -5; v <= 5; v += 1.0 / 8192) xs.push_back(static_cast<float>(v));
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 1e-8f, 1.2999999f, 1.3f, 1.3000001f, 3.9199998f, 3.92f, 9.f, 1e30f,
                  -1e30f, INFINITY, -INFINITY, NAN})
    xs.push_back(v);
  Tensor x = from_vector<float>(xs);
  jit::Function f = jit::trace([](Tensor t) { return erf(t) * 2.0; }, {x});
  std::vector<float> got = f(x).to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = 2.0 * std::erf(static_cast<double>(xs[i]));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << "erf(" << xs[i] << ") = " << got[i] / 2;
      continue;
    }
    if (static_cast<float>(want) == 0) {
      EXPECT_EQ(got[i], 0.f) << "erf(" << xs[i] << ")";
      continue;
    }
    worst = std::max(worst, ulp_error(got[i], want));
  }
  EXPECT_LE(worst, 2.0);
  std::printf("fused erf: worst error %.2f ulp over %zu values\n", worst, xs.size());
}

// The kernels compute f32 exp inline (codegen/llvm/math.cpp): within 1 ULP of a double reference
// over a dense sweep of its whole range (subnormal results included) and the special values.
TEST_F(Fused, ExpIsWithinOneUlp) {
  NoGradGuard no_grad;
  std::vector<float> xs;
  for (double v = -110; v <= 90; v += 1.0 / 1024) xs.push_back(static_cast<float>(-v));
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 88.72283935546875f, 88.7228f, -87.34f, -103.97f, -104.f, -104.01f, 1e30f,
                  -1e30f, INFINITY, -INFINITY, NAN})
    xs.push_back(-v);
  Tensor x = from_vector<float>(xs);
  jit::Function f = jit::trace([](Tensor t) { return exp(-t); }, {x});  // two ops: a kernel
  jit::KernelCacheStats before = jit::kernel_cache_stats();
  std::vector<float> got = f(x).to_vector<float>();
  jit::KernelCacheStats after = jit::kernel_cache_stats();
  ASSERT_EQ(after.hits + after.misses - before.hits - before.misses, 1) << "exp ran eagerly, not fused";
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    float want = static_cast<float>(std::exp(-static_cast<double>(xs[i])));
    if (std::isnan(want) || std::isinf(want) || want == 0) {
      EXPECT_TRUE(std::isnan(want) ? std::isnan(got[i]) : got[i] == want) << "exp(" << -xs[i] << ") = " << got[i];
      continue;
    }
    worst = std::max(worst, ulp_error(got[i], want));
  }
  EXPECT_LE(worst, 1.0);
  std::printf("fused exp: worst error %.2f ulp over %zu values\n", worst, xs.size());
}

// A new batch size retraces and replans but compiles no kernel: kernels take sizes as arguments.
// A fused kernel's bits do not depend on its operands' layouts: over a transposed operand the
// loop reads lanes one by one (SLEEF's scalar variants), over contiguous ones in vectors (its
// vector variants), and the two give the same bits, as eager's kernels do.
TEST_F(Fused, BitsDoNotDependOnTheLayout) {
  NoGradGuard no_grad;
  manual_seed(31);
  auto fn = [](Tensor a, Tensor b) { return pow(a, b) + erf(a) * log1p(b * b) + tanh(a - b); };
  Tensor a = (rand({37, 29}) * 4.0).t(), b = randn({29, 37});
  jit::Function strided = jit::trace(fn, {a, b}), contiguous = jit::trace(fn, {a.contiguous(), b});
  test::expect_same(strided(a, b), contiguous(a.contiguous(), b));
}

TEST_F(Fused, NewBatchSizesCompileNothing) {
  NoGradGuard no_grad;
  Tensor w = randn({16, 32}), bias = randn({32});
  auto mlp = [&](Tensor x) {
    Tensor h = matmul(x, w) + bias;
    Tensor g = h * 0.5 * (tanh((h + h * h * h * 0.044715) * 0.7978845608) + 1);
    Tensor m = amax(g, {-1}, true);
    Tensor e = exp(g - m);
    return e / e.sum({-1}, true);
  };
  jit::Function f = jit::trace(mlp, {randn({4, 16})});
  auto built = [] {
    jit::KernelCacheStats s = jit::kernel_cache_stats();
    return s.compiles + s.disk_hits;
  };
  f(randn({4, 16}));  // the first call loads the kernels
  int64_t after_first = built();
  for (int64_t batch : {3, 5, 8, 16, 33}) {
    Tensor x = randn({batch, 16});
    EXPECT_TRUE(test::close_enough(f(x), mlp(x))) << "batch " << batch;
  }
  EXPECT_EQ(built(), after_first);
  EXPECT_EQ(f.stats().traces, 6);
}

// Eight threads share a function's plans; a call that traces and compiles a new signature does
// not hold up calls on signatures already planned.
TEST_F(Fused, ConcurrentCallsDoNotWaitForACompile) {
  NoGradGuard no_grad;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, tracing_slow = false;
  auto fn = [&](Tensor x) {
    if (x.dim() == 3) {  // the slow signature: its trace waits until the others are done
      std::unique_lock<std::mutex> lock(mu);
      tracing_slow = true;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::seconds(20), [&] { return release; });
    }
    return exp(x) * 2 + 1;
  };
  std::vector<Tensor> fast_inputs;
  for (int i = 0; i < 4; ++i) fast_inputs.push_back(randn({i + 2, 5}));
  jit::Function f = jit::trace(fn, {fast_inputs[0]});
  for (const Tensor& x : fast_inputs) f(x);  // every fast signature planned
  std::thread slow([&] {
    Tensor x = randn({2, 2, 2});
    EXPECT_TRUE(test::close_enough(f(x), exp(x) * 2 + 1));
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return tracing_slow; });
  }
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const Tensor& x = fast_inputs[(t + i) % 4];
        if (!test::close_enough(f(x), exp(x) * 2 + 1)) ++wrong;
      }
      ++done;
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(done.load(), 8);  // reached while the slow trace still waits
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_FALSE(release);
    release = true;
  }
  cv.notify_all();
  slow.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Intermediates only kernels read share workspace blocks once their last reader has run.
TEST_F(Fused, MemoryPlanReusesBuffers) {
  ir::Graph g = ir::parse(R"(graph @chain(%0: f32[64,64], %1: f32[64,64]) -> (f32[64,64]) {
  %2 = exp %0 : f32[64,64]
  %3 = mul %2, 2.0 : f32[64,64]
  %4 = matmul %3, %1 : f32[64,64]
  %5 = exp %4 : f32[64,64]
  %6 = mul %5, 2.0 : f32[64,64]
  %7 = matmul %6, %1 : f32[64,64]
  %8 = exp %7 : f32[64,64]
  %9 = mul %8, 2.0 : f32[64,64]
  %10 = matmul %9, %1 : f32[64,64]
  return %10
})");
  ir::Graph fused = ir::fuse(g);
  for (ir::Node& n : fused.nodes) n.grad = false;
  jit::Executable exec(fused);
  EXPECT_EQ(exec.stats().kernels, 3u);
  EXPECT_EQ(exec.stats().planned_bytes, 64u * 64u * 4u);  // one block, used three times
  NoGradGuard no_grad;
  Tensor x = randn({64, 64}) * 0.1, w = randn({64, 64}) * 0.01;
  Tensor args[] = {x, w};
  for (int call = 0; call < 2; ++call) {  // the second call reuses the first one's workspace
    Tensor got = exec.run(args, {})[0];
    EXPECT_TRUE(test::close_enough(got, jit::run_graph(g, args, {})[0]));
  }
}

// An update assigned to the param it reads element for element (an optimizer step) is written
// by its kernel into the param itself; one whose param is read later, or is read through a
// transpose, is computed aside and copied.
TEST_F(Fused, UpdatesWriteIntoTheirParamsWhereNothingReadsThemAfter) {
  ir::Graph g = ir::parse(R"(graph @step(%0: f32[8,8]) params(%1: f32[8,8], %2: f32[8,8], %3: f32[8,8]) -> (f32[8,8]) {
  %4 = mul %0, 0.5 : f32[8,8]
  %5 = sub %1, %4 : f32[8,8]
  %6 = exp %5 : f32[8,8]
  assign %1, %6
  %7 = permute %2 {axes=[1,0]} : f32[8,8]
  %8 = add %7, %0 : f32[8,8]
  %9 = neg %8 : f32[8,8]
  assign %2, %9
  %10 = add %3, 1.0 : f32[8,8]
  %11 = sqrt %10 : f32[8,8]
  %12 = matmul %3, %0 : f32[8,8]
  assign %3, %11
  return %12
})");
  ir::Graph fused = ir::fuse(g);
  for (ir::Node& n : fused.nodes) n.grad = false;
  jit::Executable exec(fused);
  EXPECT_EQ(exec.stats().in_place, 1u) << ir::print(fused);  // only %1's update
  NoGradGuard no_grad;
  Tensor x = randn({8, 8});
  std::vector<Tensor> fast = {randn({8, 8}), randn({8, 8}), rand({8, 8})};
  std::vector<Tensor> ref;
  for (const Tensor& p : fast) ref.push_back(p.clone());
  const void* data = fast[0].data_ptr();
  uint32_t version = fast[0].impl()->storage->version();
  Tensor args[] = {x};
  for (int call = 0; call < 2; ++call) {
    Tensor got = exec.run(args, fast)[0];
    Tensor want = jit::run_graph(g, args, ref)[0];
    EXPECT_TRUE(test::close_enough(got, want));
    for (size_t i = 0; i < fast.size(); ++i) EXPECT_TRUE(test::close_enough(fast[i], ref[i])) << "param " << i;
  }
  EXPECT_EQ(fast[0].data_ptr(), data);
  EXPECT_EQ(fast[0].impl()->storage->version(), version + 2);  // each write counts
}

// Softmax's row passes compute exp once: the sum's pass keeps exp(x - max) in the output and
// the final pass divides what it reads back (log_softmax, whose output does not read the exp,
// keeps nothing).
TEST_F(Fused, SoftmaxKernelComputesExpOnce) {
  auto exp_calls = [](const char* text) {
    ir::Graph fused = ir::fuse(ir::parse(text));
    const ir::Node* group = nullptr;
    for (const ir::Node& n : fused.nodes)
      if (n.kind == ir::NodeKind::Fused) group = &n;
    EXPECT_NE(group, nullptr) << ir::print(fused);
    if (!group) return -1;
    codegen::KernelLayout layout;
    layout.rank = 2;
    layout.reduced = 0b10;
    layout.parallel_dim = 0;
    layout.inputs = {{DType::F32, 0, true}};
    layout.outputs = {{DType::F32, 0, true}};
    std::string src = codegen::cpu_backend().emit(*group->body, layout, "exp_once");
    int calls = 0;  // the inline f32 exp rounds x / ln 2 once
    for (size_t at = src.find("call"); at != std::string::npos; at = src.find("call", at + 1))
      calls += src.compare(src.find('@', at), 14, "@llvm.rint.f32") == 0;
    return calls;
  };
  EXPECT_EQ(exp_calls(R"(graph @softmax(%0: f32[4,8]) -> (f32[4,8]) {
  %1 = amax %0 {axes=[1], keepdim=true} : f32[4,1]
  %2 = sub %0, %1 : f32[4,8]
  %3 = exp %2 : f32[4,8]
  %4 = sum %3 {axes=[1], keepdim=true} : f32[4,1]
  %5 = div %3, %4 : f32[4,8]
  return %5
})"),
            1);
  EXPECT_EQ(exp_calls(R"(graph @log_softmax(%0: f32[4,8]) -> (f32[4,8]) {
  %1 = amax %0 {axes=[1], keepdim=true} : f32[4,1]
  %2 = sub %0, %1 : f32[4,8]
  %3 = exp %2 : f32[4,8]
  %4 = sum %3 {axes=[1], keepdim=true} : f32[4,1]
  %5 = log %4 : f32[4,1]
  %6 = sub %2, %5 : f32[4,8]
  return %6
})"),
            1);
  // And the stashed softmax gives eager's answer on rows longer than a vector.
  expect_fused_matches([](std::vector<Tensor> in) { return softmax(in[0] * 3.0, -1); }, {randn({37, 100})});
}

// Work on a reduction's non-keepdim result fuses (reduced space), and a pointwise group merges
// into the reduction group it feeds; both give eager's answers, strided operands included.
TEST_F(Fused, SqueezedReductionsAndMergedProducersMatchEager) {
  expect_fused_matches([](std::vector<Tensor> in) { return sqrt(sum(exp(in[0]), {-1}) / 8.0) + 1.0; },
                       {randn({33, 70})});
  expect_fused_matches([](std::vector<Tensor> in) { return amax(in[0] * 2.0, {1, 2}) - 3.0; }, {randn({5, 6, 7})});
  expect_fused_matches([](std::vector<Tensor> in) { return in[0] * in[1] * 2.0 - sum(exp(in[0]), {-1}, true); },
                       {randn({40, 9}), randn({9, 40}).t()});
}

// f16 and bf16 groups compute in f32 and round each result as eager mode does: the same bits
// (close_enough compares 16-bit floats bitwise), with overflow to inf, subnormals, NaN, signed
// zeros and rounding ties among the inputs, and a transposed operand.
TEST_F(Fused, HalfGroupsGiveEagersBits) {
  std::vector<float> values = {0.f,   -0.f, 1e-7f,    -3e-6f,    6.1e-5f,          65504.f,          65520.f, 1e6f,
                               -1e6f, NAN,  INFINITY, -INFINITY, 1.f + 1.f / 2048, 1.f + 3.f / 2048, 0.1f,    3.14159f};
  std::vector<float> noise = (randn({240}) * 4).to_vector<float>();
  values.insert(values.end(), noise.begin(), noise.end());
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = from_vector(values).reshape({16, 16}).to(dt);
    Tensor y = (randn({16, 16}) * 3).to(dt);
    expect_fused_matches([](std::vector<Tensor> in) { return exp(in[0]) * in[1] + 1.5; }, {x, y});
    expect_fused_matches([](std::vector<Tensor> in) { return (in[0] / (in[1] + 0.25)).to(DType::F32) * 2.0; }, {x, y});
    expect_fused_matches([](std::vector<Tensor> in) { return sqrt(abs(in[0])) * 1000.0 - in[1].t(); }, {x, y});
    expect_fused_matches(
        [](std::vector<Tensor> in) { return where(in[0] > in[1], in[0] * 0.5, in[1]).to(DType::F64) + 1e-3; }, {x, y});
    expect_fused_matches([dt](std::vector<Tensor> in) { return (in[0].to(DType::F32) * 3.0 + 0.1).to(dt) * in[1]; },
                         {x, y});
  }
}

// A reduction over leading dims whose innermost dim is reduced too (a conv bias's gradient,
// summed over batch and space) runs per kept index with register accumulators, beside a
// full-size output of the same group.
TEST_F(Fused, LeadingReductionsWithAReducedInnerDimMatchEager) {
  auto fn = [](std::vector<Tensor> in) {
    Tensor y = relu(in[0]) * in[1];
    return y * 2.0 + sum(y, {0, 2, 3}, true);
  };
  expect_fused_matches(fn, {randn({32, 16, 8, 8}), randn({32, 16, 8, 8})});
  expect_fused_matches(fn, {randn({3, 5, 7, 9}), randn({9}).expand({3, 5, 7, 9})});
  expect_fused_matches(
      [](std::vector<Tensor> in) {
        return sum(exp(in[0]) * in[0], {0, 2}) * 3.0;
      },
      {randn({6, 4, 33}).permute({2, 1, 0}).contiguous().permute({2, 1, 0})});
}

// What KILN_LOG=cache says about a miss (the ctest entry jit_cache_log runs this test with it
// on and checks the words; here it only has to run).
TEST_F(Fused, MissReasonsNameTheChange) {
  NoGradGuard no_grad;
  jit::Function f = jit::trace([](Tensor x) { return exp(x) * 2; }, {randn({2, 4})});
  f(randn({3, 4}));
  f(randn({3, 4}, f64));
  f(randn({4, 3}).t());
  EXPECT_EQ(f.stats().traces, 4);
}

// A loop told to vectorize that cannot be (it calls an opaque function) makes LLVM report a
// remark and a warning. They describe generated code, not the user's program: they go to
// KILN_LOG=codegen (ctest llvm_diagnostics_log checks that), never to stderr otherwise.
const char* kUnvectorizableLoop = R"(declare void @opaque(i64)
define void @loop(i64 %n) {
entry:
  br label %body
body:
  %i = phi i64 [0, %entry], [%next, %body]
  call void @opaque(i64 %i)
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %body, label %done, !llvm.loop !0
done:
  ret void
}
!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.vectorize.width", i32 8}
)";

TEST(Codegen, LlvmDiagnosticsStayOffStderr) {
  testing::internal::CaptureStderr();
  std::string object = codegen::cpu_backend().compile(kUnvectorizableLoop);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(object.empty());
  if (log_enabled(LogTopic::Codegen)) {
    EXPECT_NE(err.find("[kiln:codegen] LLVM remark: <unknown>:0:0: loop not vectorized"), std::string::npos) << err;
    std::fputs(err.c_str(), stderr);  // for the ctest that reads it
  } else {
    EXPECT_EQ(err, "");
  }
}

}  // namespace
}  // namespace kiln
