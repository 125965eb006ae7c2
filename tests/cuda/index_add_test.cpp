// tests/cuda/index_add_test.cpp -- index_add on CUDA (cuda/indexed.cpp's sorted path: the
// index sorted once, then a thread per run of equal indices and column): the CPU's sums bit for
// bit, with many repeats, negative indices, views, a length that is no power of two, f16 (in
// f32, rounded once) and integers; an embedding's gradient; and the error for a bad index.
// scatter_add's sorted path likewise.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include "codegen/cuda/indexed.h"
#include "cuda/nvrtc.h"
#include "tests/cuda/cuda_test.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

using test::kGpu;

void expect_same_bits(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.to(cpu).type().str(), want.type().str());
  EXPECT_EQ(got.to(cpu).to(DType::F64).to_vector<double>(), want.to(DType::F64).to_vector<double>());
}

TEST(CudaIndexAdd, SumsInTheCpusOrder) {
  REQUIRE_CUDA();
  // 1000 entries into 7 rows (and -1, -7 from the end): long runs of repeats.
  Tensor idx = randint(-7, 7, {1000});
  for (DType t : {f32, f64, DType::F16, DType::I64}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = (randn({7, 5}) * 4).to(t), src = (randn({1000, 5}) * 4).to(t);
    expect_same_bits(index_add(x.to(kGpu), 0, idx.to(kGpu), src.to(kGpu)), index_add(x, 0, idx, src));
  }
  // Along the last dim of transposed views, with an i32 index.
  Tensor x = randn({6, 3}), src = randn({37, 3});
  Tensor i32 = randint(0, 6, {37}, DType::I32);
  expect_same_bits(index_add(x.t().to(kGpu), 1, i32.to(kGpu), src.t().to(kGpu)), index_add(x.t(), 1, i32, src.t()));
}

TEST(CudaIndexAdd, EmbeddingGradientMatchesTheCpu) {
  REQUIRE_CUDA();
  Tensor w = randn({300, 16}).requires_grad_(), tokens = randint(0, 300, {8, 200});
  Tensor wg = w.detach().to(kGpu).requires_grad_();
  Tensor g = randn({8, 200, 16});
  (embedding(tokens, w) * g).sum().backward();
  (embedding(tokens.to(kGpu), wg) * g.to(kGpu)).sum().backward();
  expect_same_bits(wg.grad(), w.grad());
}

TEST(CudaIndexAdd, RefusesAnIndexOutOfRange) {
  REQUIRE_CUDA();
  Tensor x = zeros({4, 2}).to(kGpu), src = ones({3, 2}).to(kGpu);
  test::expect_error(
      [&] {
        index_add(x, 0, from_vector<int64_t>({0, 4, 1}).to(kGpu), src).to(cpu);
      },
      {"index_add", "index 4", "size 4"});
  expect_same_bits(index_add(x, 0, zeros({0}, DType::I64).to(kGpu), zeros({0, 2}).to(kGpu)), zeros({4, 2}));
}

// The toolkit's NVRTC compiles the sorted path's kernels for the architectures kiln supports.
// scatter_add with few long lines sorts every entry by its element of out
// (codegen::scatter_add_sorts), else a thread walks each line: the CPU's sums either way.
TEST(CudaScatterAdd, SumsInTheCpusOrderSortedOrWalked) {
  REQUIRE_CUDA();
  int sms = cuda::multiprocessor_count(0);
  EXPECT_TRUE(codegen::scatter_add_sorts(1, 5000, sms));
  EXPECT_TRUE(codegen::scatter_add_sorts(64, 100000, 132));
  EXPECT_FALSE(codegen::scatter_add_sorts(64, 8, 132));          // short lines: walked
  EXPECT_FALSE(codegen::scatter_add_sorts(1 << 20, 1000, 132));  // lines enough to fill it
  struct Case {
    const char* name;
    Dims out, src;
    int64_t dim;
  };
  for (const Case& c : {Case{"one long line", {37}, {5000}, 0}, Case{"few lines along dim 0", {40, 3}, {3000, 3}, 0},
                        Case{"along the last dim", {3, 50}, {2, 700}, 1}, Case{"walked", {9, 2}, {4, 2}, 0}}) {
    SCOPED_TRACE(c.name);
    int64_t size = c.out[static_cast<size_t>(c.dim)];
    Tensor idx = randint(-size, size, c.src);
    for (DType t : {f32, DType::F16, DType::I64}) {
      SCOPED_TRACE(dtype_name(t));
      Tensor x = (randn(c.out) * 4).to(t), src = (randn(c.src) * 4).to(t);
      Tensor gx = x.to(kGpu), gi = idx.to(kGpu), gs = src.to(kGpu);
      int64_t before = cuda::kernel_launches();
      Tensor got = scatter_add(gx, c.dim, gi, gs);
      int64_t launches = cuda::kernel_launches() - before;
      // sorted: the keys, the bitonic network's steps, the segments (and the copy of x)
      int64_t lines = src.numel() / c.src[static_cast<size_t>(c.dim)];
      if (codegen::scatter_add_sorts(lines, c.src[static_cast<size_t>(c.dim)], sms)) EXPECT_GT(launches, 10);
      else EXPECT_LE(launches, 6);  // f16: widened, walked, rounded
      expect_same_bits(got, scatter_add(x, c.dim, idx, src));
    }
  }
  // Transposed views, an i32 index broadcast along the other dim (a segment sum's).
  Tensor x = randn({4, 30}), src = randn({3, 2000});
  Tensor seg = randint(0, 30, {1, 2000}, DType::I32).expand({3, 2000});
  expect_same_bits(scatter_add(x.t().to(kGpu), 0, seg.t().to(kGpu), src.t().to(kGpu)),
                   scatter_add(x.t(), 0, seg.t(), src.t()));
  Tensor ok = zeros({4}).to(kGpu);
  Tensor bad = full({100}, 1, DType::I64);
  bad = where(arange(100) == 57, 4, bad);
  test::expect_error([&] { scatter_add(ok, 0, bad.to(kGpu), ones({100}).to(kGpu)).to(cpu); },
                     {"scatter_add", "index 4 is out of range"});
}

TEST(Nvrtc, CompilesTheIndexAddKernels) {
  if (test::on_host_cuda() && std::getenv("KILN_CUDA_NVRTC") && *std::getenv("KILN_CUDA_NVRTC"))
    GTEST_SKIP() << "run by ctest cuda_nvrtc with the toolkit's NVRTC";
  if (!cuda::nvrtc_available()) GTEST_SKIP() << cuda::nvrtc_unavailable_reason();
  for (const std::string& src :
       {codegen::cuda_index_keys_kernel(DType::I32), codegen::cuda_bitonic_kernel(),
        codegen::cuda_segment_add_kernel(f32, 3), codegen::cuda_scatter_keys_kernel(DType::I64, 2),
        codegen::cuda_scatter_segment_kernel(f32, 2)})
    for (int arch : {80, 90}) EXPECT_FALSE(cuda::compile_cubin(src, arch, "kiln_kernel").empty());
}

}  // namespace
}  // namespace kiln
