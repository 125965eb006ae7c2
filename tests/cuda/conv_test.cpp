// tests/cuda/conv_test.cpp -- conv2d and its gradients through cuDNN when cuDNN ranks no working
// algorithm (on an H200, cuDNN 9 had none for either gradient of a grouped, dilated convolution
// with a channels-last operand, in every dtype; contiguous, it had): kiln retries with
// contiguous operands, then in wider dtypes, and only then names the configuration in an error;
// and when an algorithm's workspace does not fit in memory (KILN_HOST_CUDNN_WORKSPACE_MB), it
// tries the next. The host cuDNN refuses on request (KILN_HOST_CUDNN_REFUSE), so the fallbacks
// run in CI. Tensors past cuDNN's int indexing (2^31 elements) run in batch chunks: shown with
// the limit lowered on both sides (KILN_HOST_CUDNN_MAX_ELEMENTS, cuda::set_dnn_element_limit).
// Each convolution key searches cuDNN's algorithms once (the host cuDNN counts its queries), and
// the fallbacks are counted (cuda::conv_stats).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "cuda/libraries.h"
#include "examples/models/zoo.h"
#include "jit/disk_cache.h"
#include "runtime/cuda_internal.h"
#include "runtime/op.h"
#include "tests/cuda/cuda_test.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

// Convolution choices come from memory, then the disk cache: a test that counts searches runs
// with its own cache folder (KILN_CACHE_DIR; "off" for none) and forgets what the process knew,
// on the way in and out.
struct CacheDir {
  explicit CacheDir(const std::string& dir) {
    if (const char* d = std::getenv("KILN_CACHE_DIR")) saved = d;
    setenv("KILN_CACHE_DIR", dir.c_str(), 1);
    cuda::forget_conv_algorithms();
  }
  ~CacheDir() {
    if (saved) setenv("KILN_CACHE_DIR", saved->c_str(), 1);
    else unsetenv("KILN_CACHE_DIR");
    cuda::forget_conv_algorithms();
  }
  std::optional<std::string> saved;
};

// What the host cuDNN offers changes between calls of the same convolutions: kiln's cached
// choices are dropped on each change.
struct Refuse {
  CacheDir no_disk{"off"};
  explicit Refuse(const char* what) {
    setenv("KILN_HOST_CUDNN_REFUSE", what, 1);
    cuda::forget_conv_algorithms();
  }
  ~Refuse() {
    unsetenv("KILN_HOST_CUDNN_REFUSE");
    cuda::forget_conv_algorithms();
  }
};

// A grouped, strided, padded, dilated convolution: x [2,4,6,7], w [6,2,3,3], y [2,6,3,7].
Attrs conv_attrs(const Dims& result) {
  Attrs a;
  a.stride = {2, 1}, a.padding = {1, 2}, a.dilation = {1, 2}, a.groups = 2, a.shape = result;
  return a;
}
const Dims kX{2, 4, 6, 7}, kW{6, 2, 3, 3}, kY{2, 6, 3, 7};

// A channels-last view of values of `shape` in dtype t on `d` (not packed NCHW).
Tensor channels_last(const Tensor& nhwc, DType t, Device d) { return nhwc.to(t).to(d).permute({0, 3, 1, 2}); }

// The three passes on cuda:0 in dtype t, with the first operand of each channels-last, beside
// the same values' passes on the CPU in f64.
void expect_matches_cpu(DType t, double tol) {
  manual_seed(7);
  Tensor x = randn({kX[0], kX[2], kX[3], kX[1]}), w = randn(kW), g = randn({kY[0], kY[2], kY[3], kY[1]});
  auto round = [t](const Tensor& v) { return v.to(t).to(f64); };  // the values the device sees
  Tensor x64 = round(x).permute({0, 3, 1, 2}), w64 = round(w), g64 = round(g).permute({0, 3, 1, 2});
  Device gpu = cuda::device(0);
  Tensor xd = channels_last(x, t, gpu), wd = w.to(t).to(gpu), gd = channels_last(g, t, gpu);
  struct {
    const char* name;
    Tensor got, want;
  } passes[] = {
      {"conv2d", apply(OpId::Conv2d, {xd, wd}, conv_attrs({})), apply(OpId::Conv2d, {x64, w64}, conv_attrs({}))},
      {"input grad", apply(OpId::Conv2dInputGrad, {gd, wd}, conv_attrs(kX)),
       apply(OpId::Conv2dInputGrad, {g64, w64}, conv_attrs(kX))},
      {"weight grad", apply(OpId::Conv2dWeightGrad, {xd, gd}, conv_attrs(kW)),
       apply(OpId::Conv2dWeightGrad, {x64, g64}, conv_attrs(kW))},
  };
  for (auto& p : passes) {
    SCOPED_TRACE(std::string(p.name) + " in " + std::string(dtype_name(t)));
    EXPECT_EQ(p.got.dtype(), t);
    EXPECT_EQ(p.got.device(), gpu);
    test::expect_close(p.got.to(cpu).to(f64), p.want.to_vector<double>(), tol, tol);
  }
}

TEST(CudaConv, ALayoutCudnnRefusesRunsContiguous) {
  REQUIRE_HOST_CUDA();
  Refuse r("strided");
  expect_matches_cpu(f32, 1e-4);
}

TEST(CudaConv, ADtypeCudnnRefusesRunsWider) {
  REQUIRE_HOST_CUDA();
  {
    Refuse r("bf16,strided");  // bf16 in f32, rounded once
    expect_matches_cpu(DType::BF16, 2e-2);
  }
  {
    Refuse r("f16,f32");  // f16 in f64
    expect_matches_cpu(DType::F16, 2e-3);
  }
}

TEST(CudaConv, WhatNotEvenF64RunsIsAnErrorNamingTheConfiguration) {
  REQUIRE_HOST_CUDA();
  Refuse r("f32,f64");
  Tensor x = randn(kX, f32, cuda::device(0)), g = randn(kY, f32, cuda::device(0));
  test::expect_error(
      [&] {
        apply(OpId::Conv2dWeightGrad, {x, g}, conv_attrs(kW));
      },
      {"conv2d_weight_grad: cuDNN has no algorithm", "[2,4,6,7]", "f32", "stride [2,1]", "groups 2",
       "not even contiguous in f64"});
}

// cuDNN's first-ranked algorithm asks for more workspace than the device has (the host cuDNN's
// asks for a terabyte on request): the next one runs, in each pass.
TEST(CudaConv, AnAlgorithmWhoseWorkspaceDoesNotFitGivesWayToTheNext) {
  REQUIRE_HOST_CUDA();
  CacheDir no_disk("off");
  setenv("KILN_HOST_CUDNN_WORKSPACE_MB", "1048576", 1);
  cuda::forget_conv_algorithms();
  expect_matches_cpu(f32, 1e-4);
  unsetenv("KILN_HOST_CUDNN_WORKSPACE_MB");
}

// The host cuDNN's count of algorithm queries (cuDNN's cost about a millisecond each), or of
// the timed ones among them.
long long host_cudnn_queries(const char* which = "kiln_host_cudnn_algorithm_queries") {
  void* lib = dlopen(std::getenv("KILN_CUDA_CUDNN"), RTLD_LAZY);
  auto queries = lib ? reinterpret_cast<long long (*)()>(dlsym(lib, which)) : nullptr;
  EXPECT_NE(queries, nullptr) << "the host cuDNN loads";
  long long n = queries ? queries() : -1;
  if (lib) dlclose(lib);
  return n;
}

// Each convolution (its shapes, strides, dtype, ...) asks cuDNN for an algorithm once; later
// calls run the cached choice. Another layout of the same shapes is another key.
TEST(CudaConv, EachConvolutionSearchesItsAlgorithmOnce) {
  REQUIRE_HOST_CUDA();
  CacheDir no_disk("off");
  expect_matches_cpu(f32, 1e-4);  // the first calls: three keys, one search each
  const cuda::ConvStats first = cuda::conv_stats();
  const long long queries = host_cudnn_queries();
  for (int i = 0; i < 3; ++i) expect_matches_cpu(f32, 1e-4);
  const cuda::ConvStats later = cuda::conv_stats();
  EXPECT_EQ(later.algorithm_searches, first.algorithm_searches);
  EXPECT_EQ(later.cached - first.cached, 9);
  EXPECT_EQ(host_cudnn_queries(), queries) << "no query after the first call of each key";
  // Contiguous operands: three new keys.
  Device gpu = cuda::device(0);
  Tensor x = randn(kX, f32, gpu), w = randn(kW, f32, gpu), g = randn(kY, f32, gpu);
  apply(OpId::Conv2d, {x, w}, conv_attrs({}));
  apply(OpId::Conv2dInputGrad, {g, w}, conv_attrs(kX));
  apply(OpId::Conv2dWeightGrad, {x, g}, conv_attrs(kW));
  EXPECT_EQ(cuda::conv_stats().algorithm_searches, later.algorithm_searches + 3);
  EXPECT_EQ(host_cudnn_queries(), queries + 3);
  // TF32 allowed is another math type: another key.
  cuda::set_allow_tf32(true);
  apply(OpId::Conv2d, {x, w}, conv_attrs({}));
  cuda::set_allow_tf32(false);
  EXPECT_EQ(cuda::conv_stats().algorithm_searches, later.algorithm_searches + 4);
}

// Under set_cudnn_benchmark a new key times the candidates (cudnnFind*Ex) on its operands, in a
// workspace the size the largest working candidate asks for (here 64 MB); the timed choice is
// cached apart from the ranked one.
TEST(CudaConv, CudnnBenchmarkTimesEachConvolutionOnce) {
  REQUIRE_HOST_CUDA();
  CacheDir no_disk("off");
  setenv("KILN_HOST_CUDNN_WORKSPACE_MB", "64", 1);
  const long long timed = host_cudnn_queries("kiln_host_cudnn_timed_queries");
  cuda::set_cudnn_benchmark(true);
  expect_matches_cpu(f32, 1e-4);
  expect_matches_cpu(f32, 1e-4);
  cuda::set_cudnn_benchmark(false);
  EXPECT_EQ(host_cudnn_queries("kiln_host_cudnn_timed_queries") - timed, 3) << "one timed search per key";
  const int64_t searches = cuda::conv_stats().algorithm_searches;
  expect_matches_cpu(f32, 1e-4);  // ranked: three other keys
  EXPECT_EQ(cuda::conv_stats().algorithm_searches - searches, 3);
  EXPECT_EQ(host_cudnn_queries("kiln_host_cudnn_timed_queries") - timed, 3);
  unsetenv("KILN_HOST_CUDNN_WORKSPACE_MB");
}

// The choices are kept on disk beside the kernels: a process that starts warm reads them and
// asks cuDNN nothing. An entry that does not decode to an algorithm of cuDNN's is ignored and
// searched over (the disk cache checks the file; this checks what it holds).
TEST(CudaConv, AWarmStartReadsTheChoicesFromDisk) {
  REQUIRE_HOST_CUDA();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("kiln-conv-choices-{}", ::getpid());
  fs::remove_all(dir);
  CacheDir cache(dir.string());
  const cuda::ConvStats before = cuda::conv_stats();
  expect_matches_cpu(f32, 1e-4);
  const cuda::ConvStats cold = cuda::conv_stats();
  EXPECT_EQ(cold.algorithm_searches - before.algorithm_searches, 3);
  cuda::forget_conv_algorithms();  // as a new process
  const long long queries = host_cudnn_queries();
  expect_matches_cpu(f32, 1e-4);
  const cuda::ConvStats warm = cuda::conv_stats();
  EXPECT_EQ(warm.algorithm_searches, cold.algorithm_searches);
  EXPECT_EQ(warm.loaded - cold.loaded, 3);
  EXPECT_EQ(host_cudnn_queries(), queries) << "a warm start asks cuDNN nothing";
  // Rewrite each choice's entry (a sound file) with an algorithm cuDNN does not have, or words.
  int rewritten = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() < 32) continue;
    uint64_t id_len;
    std::memcpy(&id_len, bytes.data() + 8, 8);
    std::string identity = bytes.substr(32, id_len);
    if (identity.rfind("kiln cudnn convolution choice", 0) != 0) continue;
    jit::disk_cache_put(identity, rewritten++ % 2 ? "77 0" : "0 zero");
  }
  EXPECT_EQ(rewritten, 3);
  cuda::forget_conv_algorithms();
  expect_matches_cpu(f32, 1e-4);
  EXPECT_EQ(cuda::conv_stats().algorithm_searches - warm.algorithm_searches, 3) << "each bad entry searched over";
  fs::remove_all(dir);
}

// A configuration cuDNN refuses as laid out runs on a fallback on every call: each counted, the
// searches made once (the refusal is cached with the key).
TEST(CudaConv, FallbacksAreCountedAndTheRefusalCached) {
  REQUIRE_HOST_CUDA();
  Refuse r("strided");
  const cuda::ConvStats before = cuda::conv_stats();
  expect_matches_cpu(f32, 1e-4);
  const cuda::ConvStats once = cuda::conv_stats();
  EXPECT_EQ(once.contiguous_fallbacks - before.contiguous_fallbacks, 3);
  EXPECT_EQ(once.wider_dtype_fallbacks, before.wider_dtype_fallbacks);
  EXPECT_EQ(once.algorithm_searches - before.algorithm_searches, 6) << "as laid out, then contiguous, per pass";
  expect_matches_cpu(f32, 1e-4);
  const cuda::ConvStats twice = cuda::conv_stats();
  EXPECT_EQ(twice.contiguous_fallbacks - once.contiguous_fallbacks, 3);
  EXPECT_EQ(twice.algorithm_searches, once.algorithm_searches);
  Refuse wider("bf16,strided");
  expect_matches_cpu(DType::BF16, 2e-2);
  EXPECT_EQ(cuda::conv_stats().wider_dtype_fallbacks - twice.wider_dtype_fallbacks, 3);
}

// A ResNet-50 eager training step (the tiny one: 53 convolutions and their gradients) asks cuDNN
// nothing after the first step.
TEST(CudaConv, AResNetEagerStepQueriesNoAlgorithmAfterTheFirst) {
  REQUIRE_HOST_CUDA();
  CacheDir no_disk("off");
  manual_seed(3);
  std::unique_ptr<examples::Task> task = examples::make_task("resnet50", examples::Size::Tiny, 2);
  Device gpu = cuda::device(0);
  task->model().to(gpu);
  std::unique_ptr<optim::Optimizer> opt = examples::make_optimizer("resnet50", *task);
  std::vector<Tensor> batch;
  for (const Tensor& x : task->batch(0)) batch.push_back(x.to(gpu));
  task->model().train();
  const cuda::ConvStats before = cuda::conv_stats();
  examples::train_step(*task, *opt, batch);
  const long long queries = host_cudnn_queries();
  const cuda::ConvStats first = cuda::conv_stats();
  const long long calls = first.algorithm_searches - before.algorithm_searches + first.cached - before.cached;
  EXPECT_GT(first.algorithm_searches, before.algorithm_searches);
  EXPECT_GE(calls, 2 * 53) << "each convolution and its weight gradient at least";
  examples::train_step(*task, *opt, batch);
  const cuda::ConvStats second = cuda::conv_stats();
  EXPECT_EQ(host_cudnn_queries(), queries) << "the second step asks cuDNN nothing";
  EXPECT_EQ(second.algorithm_searches, first.algorithm_searches);
  EXPECT_EQ(second.cached - first.cached, calls) << "every call of the second step runs a cached choice";
}

TEST(CudaConv, BatchChunksStayBelowTheElementLimit) {
  // Contiguous [8,3,10,10] (300 a sample) and its output [8,4,10,10] (400) below 1000: 2.
  const Dims x{8, 3, 10, 10}, y{8, 4, 10, 10};
  EXPECT_EQ(cuda::dnn_batch_chunk({{x, {300, 100, 10, 1}}, {y, {400, 100, 10, 1}}}, 1000), 2);
  EXPECT_EQ(cuda::dnn_batch_chunk({{x, {300, 100, 10, 1}}, {y, {400, 100, 10, 1}}}, int64_t{1} << 31), 8);
  // A view one sample of which spans further than its elements (every other channel of 6).
  EXPECT_EQ(cuda::dnn_batch_chunk({{x, {600, 200, 10, 1}}}, 1000), 1);
  EXPECT_EQ(cuda::dnn_batch_chunk({{x, {300, 100, 10, 1}}}, 300), 0) << "one sample does not fit";
  EXPECT_EQ(cuda::dnn_batch_chunk({{{0, 3, 10, 10}, {300, 100, 10, 1}}}, 1000), 0);
}

// With both limits at 200 elements, each pass runs one sample at a time (the host cuDNN refuses
// the whole batch), channels-last operands and the weight gradient's sum included.
TEST(CudaConv, PastCudnnsElementLimitTheBatchRunsInChunks) {
  REQUIRE_HOST_CUDA();
  setenv("KILN_HOST_CUDNN_MAX_ELEMENTS", "200", 1);
  cuda::set_dnn_element_limit(200);
  expect_matches_cpu(f32, 1e-4);
  // One sample past the limit is an error naming it.
  Tensor big = randn({2, 4, 12, 12}, f32, cuda::device(0)), w = randn({3, 4, 3, 3}, f32, cuda::device(0));
  Attrs plain;
  plain.stride = {1, 1}, plain.padding = {0, 0}, plain.dilation = {1, 1}, plain.groups = 1;
  test::expect_error(
      [&] {
        apply(OpId::Conv2d, {big, w}, plain);
      },
      {"conv2d: one sample of [2,4,12,12]", "200 elements or more"});
  cuda::set_dnn_element_limit(0);
  unsetenv("KILN_HOST_CUDNN_MAX_ELEMENTS");
}

// The op suite's configurations, as they are, on whatever CUDA this is (a GPU under
// scripts/run.sh gpu): every dtype runs, by cuDNN or by a fallback.
TEST(CudaConv, EveryFloatDtypeRuns) {
  REQUIRE_CUDA();
  expect_matches_cpu(f32, 1e-4);
  expect_matches_cpu(f64, 1e-10);
  expect_matches_cpu(DType::F16, 2e-3);
  expect_matches_cpu(DType::BF16, 2e-2);
}

}  // namespace
}  // namespace kiln
