// tests/cuda/user_kernel_test.cpp -- your own CUDA kernels (cuda/kernel.h) on cuda:0 (the host
// CUDA in CI, which compiles and runs them as kiln's own): bodies against the CPU, template
// arguments, strides, f16 bits, shared memory and barriers, init values, the caches in memory
// and on disk (a second process compiles nothing), a capture that replays it, and the errors:
// a compile error with the body's line, bad names, counts and devices, a call inside a trace.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "cuda/kernel.h"
#include "cuda/kernel_cache.h"
#include "cuda/nvrtc.h"
#include "jit/trace.h"
#include "runtime/cuda_internal.h"
#include "runtime/files.h"
#include "tests/cuda/cuda_test.h"
#include "tests/ops/reference.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

using test::kGpu;

// y = x * F, in x's dtype T.
const char* kScale = R"(
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < y_dims.numel) y[i] = x[i] * (T)F;
)";

cuda::KernelCall call_like(const Tensor& x, std::vector<std::pair<std::string, cuda::KernelTemplateArg>> t = {}) {
  cuda::KernelCall c;
  c.output_shapes = {x.shape()};
  c.output_dtypes = {x.dtype()};
  c.template_args = std::move(t);
  return c;
}

void expect_exactly(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.to(cpu).type().str(), want.to(cpu).type().str());
  EXPECT_TRUE(test::all_close(got.to(cpu), want.to(cpu).to(f64).to_vector<double>(), want.shape(), {0, 0}))
      << got.to(cpu) << "\nwant\n"
      << want.to(cpu);
}

TEST(CudaUserKernel, RunsItsBodyOnEveryElementWithItsTemplateArguments) {
  REQUIRE_CUDA();
  cuda::Kernel scale("scale", {"x"}, {"y"}, kScale);
  for (DType t : {f32, f64, DType::I32}) {
    SCOPED_TRACE(dtype_name(t));
    for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{1000}}) {
      Tensor x = randint(-50, 50, {n}).to(t);
      Tensor y = scale({x.to(kGpu)}, call_like(x, {{"T", t}, {"F", int64_t{3}}}))[0];
      EXPECT_EQ(y.device(), kGpu);
      expect_exactly(y, x * 3);
    }
  }
  // A view is read as the contiguous tensor it shows (MLX's ensure_row_contiguous).
  Tensor m = randn({6, 5});
  Tensor t = m.to(kGpu).permute({1, 0});
  expect_exactly(scale({t}, call_like(t, {{"T", f32}, {"F", int64_t{2}}}))[0], m.permute({1, 0}) * 2);
  // No elements: nothing to launch.
  Tensor none = empty({0, 3}, f32, kGpu);
  EXPECT_EQ(scale({none}, call_like(none, {{"T", f32}, {"F", int64_t{2}}}))[0].numel(), 0);
}

TEST(CudaUserKernel, ReadsStridesWhenAskedTo) {
  REQUIRE_CUDA();
  cuda::Kernel copy("strided_copy", {"x"}, {"y"}, R"(
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < y_dims.numel) y[i] = x[kiln_offset(i, x_dims)];
  )");
  Tensor m = randn({4, 7, 3});
  Tensor v = m.to(kGpu).permute({2, 0, 1}).slice(1, 1, 4);
  cuda::KernelCall c = call_like(v);
  c.contiguous_inputs = false;
  expect_exactly(copy({v}, c)[0], m.permute({2, 0, 1}).slice(1, 1, 4).contiguous());
}

TEST(CudaUserKernel, SeveralOperandsSharedMemoryAndBarriers) {
  REQUIRE_CUDA();
  // Per block of 128 elements: the sum of a * b (a tree in shared memory) and its largest a.
  cuda::Kernel dot("block_dot", {"a", "b"}, {"sums", "peaks"}, R"(
    float* s = kiln_shared<float>();
    unsigned t = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + t;
    s[t] = i < a_dims.numel ? a[i] * b[i] : 0.f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (t < stride) s[t] += s[t + stride];
      __syncthreads();
    }
    if (t == 0) {
      sums[blockIdx.x] = s[0];
      float m = a[(long long)blockIdx.x * blockDim.x];
      for (long long j = (long long)blockIdx.x * blockDim.x; j < a_dims.numel && j < ((long long)blockIdx.x + 1) * blockDim.x; ++j)
        m = fmaxf(m, a[j]);
      peaks[blockIdx.x] = m;
    }
  )");
  Tensor a = randint(-8, 8, {300}).to(f32), b = randint(-8, 8, {300}).to(f32);
  cuda::KernelCall c;
  c.output_shapes = {{3}, {3}};
  c.output_dtypes = {f32, f32};
  c.grid = {3, 1, 1};
  c.block = {128, 1, 1};
  c.shared_bytes = 128 * sizeof(float);
  std::vector<Tensor> out = dot({a.to(kGpu), b.to(kGpu)}, c);
  Tensor padded_a = cat({a, zeros({84})}), padded_b = cat({b, zeros({84})});
  expect_exactly(out[0], sum((padded_a * padded_b).reshape({3, 128}), {1}));
  expect_exactly(out[1], amax(cat({a, full({84}, -100.f)}).reshape({3, 128}), {1}));
}

TEST(CudaUserKernel, HalfElementsAreTheirBitsAndInitValuesFillFirst) {
  REQUIRE_CUDA();
  cuda::Kernel twice("twice_even", {"x"}, {"y"}, R"(
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < y_dims.numel && i % 2 == 0) y[i] = kiln_f2h(kiln_h2f(x[i]) * 2.f);
  )");
  Tensor x = randn({9}).to(DType::F16);
  cuda::KernelCall c = call_like(x);
  c.init_value = -1.0;
  Tensor y = twice({x.to(kGpu)}, c)[0].to(cpu);
  std::vector<double> xs = x.to(f64).to_vector<double>(), ys = y.to(f64).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ys[i], i % 2 == 0 ? xs[i] * 2 : -1.0) << i;
}

TEST(CudaUserKernel, ACompileErrorShowsTheBodysLine) {
  REQUIRE_CUDA();
  cuda::Kernel bad("bad_kernel", {"x"}, {"y"},
                   "long long i = threadIdx.x;\nif (i < y_dims.numel)\n  y[i] = x[i] +* ;\n");
  Tensor x = ones({4}, f32, kGpu);
  try {
    bad({x}, call_like(x));
    ADD_FAILURE() << "a kernel with a syntax error compiled";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("cuda::Kernel bad_kernel"), std::string::npos) << what;
    // NVRTC writes bad_kernel(3), a host compiler bad_kernel:3:
    EXPECT_TRUE(std::regex_search(what, std::regex(R"(bad_kernel(\(3\)|:3:))"))) << what;
  }
}

TEST(CudaUserKernel, BadNamesCountsAndDevicesAreErrors) {
  REQUIRE_CUDA();
  test::expect_error([] { cuda::Kernel("k", {"1x"}, {"y"}, ""); }, {"cuda::Kernel k", "'1x'", "C identifier"});
  test::expect_error([] { cuda::Kernel("k", {"kiln_x"}, {"y"}, ""); }, {"'kiln_x'", "kiln_"});
  test::expect_error([] { cuda::Kernel("k", {"x"}, {"x"}, ""); }, {"'x'", "used twice"});
  test::expect_error([] { cuda::Kernel("k", {"x"}, {}, ""); }, {"at least one output"});
  test::expect_error([] { cuda::Kernel("k\"", {"x"}, {"y"}, ""); }, {"without quotes"});
  cuda::Kernel scale("scale", {"x"}, {"y"}, kScale);
  Tensor x = ones({4}, f32, kGpu);
  cuda::KernelCall c = call_like(x, {{"T", f32}, {"F", int64_t{2}}});
  test::expect_error([&] { scale({x, x}, c); }, {"cuda::Kernel scale", "expected 1 inputs (x), got 2"});
  test::expect_error([&] { scale({ones({4})}, c); }, {"cuda::Kernel scale", "f32[4]", "one CUDA device"});
  cuda::KernelCall two = c;
  two.output_dtypes.push_back(f32);
  test::expect_error([&] { scale({x}, two); }, {"1 outputs (y)", "1 shapes and 2 dtypes"});
  cuda::KernelCall huge = c;
  huge.block = {2048, 1, 1};
  test::expect_error([&] { scale({x}, huge); }, {"a block of [2048, 1, 1]"});
  // Inside a trace its tensors hold no data: refused, saying why.
  test::expect_error([&] { jit::trace([&](Tensor a) { return scale({a}, c)[0]; }, {x})(x); },
                     {"cuda::Kernel scale", "runs eagerly"});
}

// A text of its own per run (the parent's process id), so the parent compiles it once and its
// child must find it on disk.
std::string once_per_run_source(const std::string& run) { return std::string(kScale) + "// run " + run + "\n"; }

TEST(CudaUserKernel, CompiledOnceAndFoundOnDiskByAnotherProcess) {
  REQUIRE_CUDA();
  if (std::getenv("KILN_USER_KERNEL_CHILD")) GTEST_SKIP() << "the child's side is CudaUserKernelChild";
  const std::string run = std::to_string(::getpid());
  cuda::Kernel k("scale_once", {"x"}, {"y"}, once_per_run_source(run));
  Tensor x = arange(10).to(f32).to(kGpu);
  cuda::KernelCall c = call_like(x, {{"T", f32}, {"F", int64_t{5}}});
  jit::KernelCacheStats before = jit::kernel_cache_stats();
  expect_exactly(k({x}, c)[0], arange(10).to(f32) * 5);
  jit::KernelCacheStats first = jit::kernel_cache_stats();
  EXPECT_EQ(first.compiles - before.compiles, 1);
  // Its second call finds the variant in the kernel itself: no text, no lookup.
  expect_exactly(k({x}, c)[0], arange(10).to(f32) * 5);
  jit::KernelCacheStats second = jit::kernel_cache_stats();
  EXPECT_EQ(second.compiles, first.compiles);
  EXPECT_EQ(second.hits, first.hits);
  // Another kernel of the same text finds it in the process's kernel cache.
  cuda::Kernel same("scale_once", {"x"}, {"y"}, once_per_run_source(run));
  expect_exactly(same({x}, c)[0], arange(10).to(f32) * 5);
  jit::KernelCacheStats third = jit::kernel_cache_stats();
  EXPECT_EQ(third.compiles, first.compiles);
  EXPECT_EQ(third.hits - second.hits, 1);
  std::optional<std::string> out =
      files::run_program({fmt::format("/proc/{}/exe", ::getpid()), "--gtest_also_run_disabled_tests",
                          "--gtest_filter=CudaUserKernelChild.*"},
                         {"KILN_USER_KERNEL_CHILD=" + run});
  ASSERT_TRUE(out.has_value()) << "the child process failed";
}

// Disabled: only CompiledOnceAndFoundOnDiskByAnotherProcess runs it, in its child process.
TEST(CudaUserKernelChild, DISABLED_FindsTheParentsKernelOnDisk) {
  const char* run = std::getenv("KILN_USER_KERNEL_CHILD");
  ASSERT_TRUE(run) << "run by CompiledOnceAndFoundOnDiskByAnotherProcess";
  cuda::Kernel k("scale_once", {"x"}, {"y"}, once_per_run_source(run));
  Tensor x = arange(10).to(f32).to(kGpu);
  jit::KernelCacheStats before = jit::kernel_cache_stats();
  expect_exactly(k({x}, call_like(x, {{"T", f32}, {"F", int64_t{5}}}))[0], arange(10).to(f32) * 5);
  jit::KernelCacheStats after = jit::kernel_cache_stats();
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.disk_hits - before.disk_hits, 1);
}

TEST(CudaUserKernel, ACaptureRecordsItAndReplaysRunIt) {
  REQUIRE_CUDA();
  cuda::Kernel scale("scale", {"x"}, {"y"}, kScale);
  Tensor x = randn({500}).to(kGpu);
  cuda::KernelCall c = call_like(x, {{"T", f32}, {"F", int64_t{4}}});
  scale({x}, c);  // compiled outside the capture
  Tensor y;
  std::string why;
  std::unique_ptr<cuda::CapturedGraph> graph = test::capture([&] { y = scale({x}, c)[0]; }, &why);
  ASSERT_TRUE(graph) << why;
  for (int i = 0; i < 2; ++i) {
    Tensor fresh = randn({500});
    x.copy_(fresh.to(kGpu));
    graph->launch();
    expect_exactly(y, fresh * 4);
  }
}

// The toolkit's NVRTC compiles the text kiln writes around a body, for sm_80 and sm_90, in each
// element type (ctest cuda_nvrtc).
TEST(Nvrtc, CompilesUserKernels) {
  if (cuda::nvrtc_available() == false) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  const char* driver = std::getenv("KILN_CUDA_NVRTC");
  if (driver && std::string(driver).find("kiln_host_cuda") != std::string::npos)
    GTEST_SKIP() << "run by ctest cuda_nvrtc with the toolkit's NVRTC";
  cuda::Kernel scale("scale", {"x"}, {"y"}, kScale);
  cuda::Kernel half("half", {"x"}, {"y"}, "y[threadIdx.x] = kiln_f2bf(kiln_h2f(x[threadIdx.x]));");
  for (int arch : {80, 90}) {
    for (DType t : {f32, f64, DType::I32, DType::I64, DType::U8}) {
      std::vector<DType> in{t};
      cuda::KernelCall c;
      c.output_shapes = {{4}};
      c.output_dtypes = {t};
      c.template_args = {{"T", t}, {"F", int64_t{3}}};
      std::string symbol, src = cuda::named_source(scale.full_source(in, c), &symbol);
      EXPECT_FALSE(cuda::compile_cubin(src, arch, symbol).empty()) << dtype_name(t);
    }
    std::vector<DType> in{DType::F16};
    cuda::KernelCall c;
    c.output_shapes = {{4}};
    c.output_dtypes = {DType::BF16};
    std::string symbol, src = cuda::named_source(half.full_source(in, c), &symbol);
    EXPECT_FALSE(cuda::compile_cubin(src, arch, symbol).empty());
  }
}

}  // namespace
}  // namespace kiln
