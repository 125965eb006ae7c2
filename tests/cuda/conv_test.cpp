// tests/cuda/conv_test.cpp -- conv2d and its gradients through cuDNN when cuDNN ranks no working
// algorithm (on an H200, cuDNN 9 had none for either gradient of a grouped, dilated convolution
// with a channels-last operand, in every dtype; contiguous, it had): kiln retries with
// contiguous operands, then in wider dtypes, and only then names the configuration in an error;
// and when an algorithm's workspace does not fit in memory (KILN_HOST_CUDNN_WORKSPACE_MB), it
// tries the next. The host cuDNN refuses on request (KILN_HOST_CUDNN_REFUSE), so the fallbacks
// run in CI. Tensors past cuDNN's int indexing (2^31 elements) run in batch chunks: shown with
// the limit lowered on both sides (KILN_HOST_CUDNN_MAX_ELEMENTS, cuda::set_dnn_element_limit).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <string>

#include "cuda/libraries.h"
#include "runtime/cuda_internal.h"
#include "runtime/op.h"
#include "tests/cuda/cuda_test.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

struct Refuse {
  explicit Refuse(const char* what) { setenv("KILN_HOST_CUDNN_REFUSE", what, 1); }
  ~Refuse() { unsetenv("KILN_HOST_CUDNN_REFUSE"); }
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
  setenv("KILN_HOST_CUDNN_WORKSPACE_MB", "1048576", 1);
  expect_matches_cpu(f32, 1e-4);
  unsetenv("KILN_HOST_CUDNN_WORKSPACE_MB");
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
