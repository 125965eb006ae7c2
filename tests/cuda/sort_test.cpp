// tests/cuda/sort_test.cpp -- argsort, sort and topk on CUDA (cuda/sort.cpp): the CPU's
// order, index for index, on every dtype, both directions, rows short enough to be ranked and
// long enough to take several radix tiles, with ties, NaN, -0, infinities and integer extremes;
// topk through radix select (ties at the k-th value, rows all equal) and through a whole sort;
// views along any dim; empty rows and k = 0; the pure functions that choose the path; and NVRTC
// compiling every kernel.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <fmt/format.h>

#include <limits>

#include "codegen/cuda/sort.h"
#include "cuda/nvrtc.h"
#include "tests/cuda/cuda_test.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

using test::kGpu;

std::vector<int64_t> indices(const Tensor& t) { return t.to(cpu).contiguous().to_vector<int64_t>(); }

// Values with many ties; for floats a share of NaN, -0, 0 and the infinities; for integers
// their extremes beside small values.
Tensor awkward(const Dims& shape, DType t) {
  Tensor small = (randint(-6, 7, shape).to(DType::F64) * 0.25);
  Tensor u = rand(shape, DType::F64);
  if (is_float(t)) {
    const double inf = std::numeric_limits<double>::infinity();
    Tensor x = where(lt(u, 0.05), std::numeric_limits<double>::quiet_NaN(), small);
    x = where(logical_and(ge(u, 0.05), lt(u, 0.1)), -0.0, x);
    x = where(logical_and(ge(u, 0.1), lt(u, 0.12)), inf, x);
    x = where(logical_and(ge(u, 0.12), lt(u, 0.14)), -inf, x);
    x = where(ge(u, 0.5), randn(shape, DType::F64) * 100, x);
    return x.to(t);
  }
  if (t == DType::Bool) return lt(u, 0.5);
  if (t == DType::U8) return randint(0, 256, shape, DType::U8);
  const int64_t lo = t == DType::I64 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min();
  const int64_t hi = t == DType::I64 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int32_t>::max();
  Tensor wide = randint(lo / 2, hi / 2, shape, t);
  Tensor x = where(lt(u, 0.5), small.to(t), wide);
  x = where(logical_and(ge(u, 0.5), lt(u, 0.53)), full(shape, lo, t), x);
  return where(logical_and(ge(u, 0.53), lt(u, 0.56)), full(shape, hi, t), x);
}

TEST(CudaSort, ArgsortIsTheCpusOrder) {
  REQUIRE_CUDA();
  // 40: ranked; 300: one tile of two items a thread; 5000: three tiles of eight.
  for (DType t : {f32, f64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool})
    for (int64_t cols : {40, 300, 5000})
      for (bool descending : {false, true}) {
        SCOPED_TRACE(fmt::format("{} cols {} descending {}", dtype_name(t), cols, descending));
        Tensor x = awkward({3, cols}, t);
        EXPECT_EQ(indices(argsort(x.to(kGpu), -1, descending)), indices(argsort(x, -1, descending)));
      }
}

TEST(CudaSort, SortsViewsAlongAnyDim) {
  REQUIRE_CUDA();
  Tensor x = awkward({700, 6}, f32);
  for (int64_t dim : {0, 1}) {
    Tensor g = x.to(kGpu);
    EXPECT_EQ(indices(argsort(g, dim, true)), indices(argsort(x, dim, true)));
    // A transposed view, and one at an offset.
    EXPECT_EQ(indices(argsort(g.t(), 1 - dim)), indices(argsort(x.t(), 1 - dim)));
    EXPECT_EQ(indices(argsort(g.slice(0, 3, 700), dim)), indices(argsort(x.slice(0, 3, 700), dim)));
  }
  auto [values, idx] = sort(x.to(kGpu), 0, true);
  auto [want_values, want_idx] = sort(x, 0, true);
  EXPECT_EQ(indices(idx), indices(want_idx));
  test::expect_close(values.to(cpu), want_values.to_vector<double>(), 0, 0);
}

TEST(CudaSort, TopkSelectsTheCpusK) {
  REQUIRE_CUDA();
  for (DType t : {f32, DType::BF16, DType::I64, DType::U8})
    for (int64_t k : {int64_t{1}, int64_t{40}, int64_t{600}, int64_t{2400}})
      for (bool largest : {true, false}) {
        const int64_t cols = 5000;
        SCOPED_TRACE(
            fmt::format("{} k {} largest {} selects {}", dtype_name(t), k, largest, codegen::topk_selects(cols, k)));
        Tensor x = awkward({3, cols}, t);
        auto [values, idx] = topk(x.to(kGpu), k, -1, largest);
        auto [want_values, want_idx] = topk(x, k, -1, largest);
        EXPECT_EQ(indices(idx), indices(want_idx));
        test::expect_close(values.to(cpu).to(DType::F64), want_values.to(DType::F64).to_vector<double>(), 0, 0);
      }
  // Every value tied at the k-th: the first k positions, in index order; -0 ties 0.
  Tensor same = where(lt(rand({2, 3000}), 0.5), -0.0, 0.0);
  EXPECT_EQ(indices(std::get<1>(topk(same.to(kGpu), 50))), indices(std::get<1>(topk(same, 50))));
  // Along dim 0 of a view.
  Tensor x = awkward({4000, 3}, f64);
  EXPECT_EQ(indices(std::get<1>(topk(x.to(kGpu), 7, 0))), indices(std::get<1>(topk(x, 7, 0))));
}

TEST(CudaSort, EmptyRowsAndOneElement) {
  REQUIRE_CUDA();
  EXPECT_EQ(argsort(empty({0, 500}).to(kGpu)).shape(), (Dims{0, 500}));
  EXPECT_EQ(argsort(empty({3, 0}).to(kGpu)).shape(), (Dims{3, 0}));
  EXPECT_EQ(std::get<1>(topk(randn({3, 500}).to(kGpu), 0)).shape(), (Dims{3, 0}));
  EXPECT_EQ(indices(argsort(full({1}, 2.0).to(kGpu))), (std::vector<int64_t>{0}));
  Tensor one_row = randn({100000});
  EXPECT_EQ(indices(argsort(one_row.to(kGpu))), indices(argsort(one_row)));
}

TEST(CudaSort, PathsArePureFunctionsOfTheShape) {
  EXPECT_TRUE(codegen::order_ranks(64));
  EXPECT_FALSE(codegen::order_ranks(65));
  EXPECT_EQ(codegen::radix_items(256), 1);
  EXPECT_EQ(codegen::radix_items(257), 2);
  EXPECT_EQ(codegen::radix_items(2048), 8);
  EXPECT_EQ(codegen::radix_items(1 << 20), 8);
  EXPECT_TRUE(codegen::topk_selects(50257, 40));
  EXPECT_FALSE(codegen::topk_selects(50257, 10000));
  EXPECT_FALSE(codegen::topk_selects(64, 1));
  EXPECT_EQ(codegen::order_key_bits(DType::BF16), 16);
  EXPECT_EQ(codegen::order_key_bits(DType::I64), 64);
}

TEST(Nvrtc, CompilesTheSortKernels) {
  if (test::on_host_cuda() && std::getenv("KILN_CUDA_NVRTC") && *std::getenv("KILN_CUDA_NVRTC"))
    GTEST_SKIP() << "run by ctest cuda_nvrtc with the toolkit's NVRTC";
  if (!cuda::nvrtc_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  std::vector<std::string> sources = {codegen::cuda_radix_scan_kernel(), codegen::cuda_radix_select_kernel(),
                                      codegen::cuda_radix_finish_kernel()};
  for (DType t : {f32, f64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool}) {
    sources.push_back(codegen::cuda_order_kernel(t));
    sources.push_back(codegen::cuda_radix_count_kernel(t));
    sources.push_back(codegen::cuda_radix_scatter_kernel(t));
    sources.push_back(codegen::cuda_radix_histogram_kernel(t));
  }
  // Every text for sm_90; the dtypes share all but the key's few lines, so sm_80 takes f32's.
  for (const std::string& src : sources) EXPECT_FALSE(cuda::compile_cubin(src, 90, "kiln_kernel").empty());
  for (const std::string& src : {codegen::cuda_radix_count_kernel(f32), codegen::cuda_radix_scatter_kernel(f32),
                                 codegen::cuda_radix_histogram_kernel(f32), codegen::cuda_order_kernel(f32)})
    EXPECT_FALSE(cuda::compile_cubin(src, 80, "kiln_kernel").empty());
}

}  // namespace
}  // namespace kiln
