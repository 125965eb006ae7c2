// tests/cuda/large_test.cpp -- a tensor of more than 2^31 elements (u8, so it fits) on CUDA: a
// pointwise op, a reduction, a strided copy and a cat whose result passes 2^31, each checked at
// both ends. It shows that index math, grid sizes and the kernels' loops hold past 32 bits. On
// the host CUDA (whose kernels run on one core) the pointwise op and the copy take views that
// reach past 2^31 with fewer elements, and the reduction and the cat cover every element; on a
// GPU the pointwise op covers all of them too. The host CUDA needs devices of 6 GiB: ctest runs
// it as cuda_past_2g with KILN_HOST_CUDA_MEMORY_MB=6144 (its discovered copy skips).
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <vector>

#include "tests/cuda/cuda_test.h"

namespace kiln {
namespace {

using test::kGpu;

std::vector<int64_t> values(const Tensor& t) { return t.to(cpu).to(DType::I64).to_vector<int64_t>(); }

TEST(CudaPast2G, U8PointwiseReductionCopyAndCat) {
  REQUIRE_CUDA();
  const char* mb = std::getenv("KILN_HOST_CUDA_MEMORY_MB");
  if (test::on_host_cuda() && (!mb || std::atoll(mb) < 6144))
    GTEST_SKIP() << "run by ctest cuda_past_2g, whose host CUDA devices have 6 GiB";
  const int64_t n = (int64_t{1} << 31) + 77, step = test::on_host_cuda() ? 4096 : 1;
  Tensor x = full({n}, 3, DType::U8, kGpu);
  x.slice(0, n - 5, n).fill_(7);
  // Pointwise: every step-th element (the last of them past 2^31), or all on a GPU.
  x.slice(0, 0, n, step).add_(1);
  const int64_t touched = (n + step - 1) / step, last = (touched - 1) * step;
  ASSERT_GE(last, int64_t{1} << 31);       // past int32
  const int64_t tail = step == 1 ? 8 : 7;  // the last five, 7 before the add
  EXPECT_EQ(values(x.slice(0, 0, 2)), (std::vector<int64_t>{4, step == 1 ? 4 : 3}));
  EXPECT_EQ(values(x.slice(0, last, last + 1)), (std::vector<int64_t>{last >= n - 5 ? tail : 4}));
  EXPECT_EQ(values(x.slice(0, n - 6, n)), (std::vector<int64_t>{step == 1 ? 4 : 3, tail, tail, tail, tail, tail}));
  // A reduction over every element.
  const int64_t total = 3 * (n - 5) + 7 * 5 + touched;
  EXPECT_EQ(sum(x).item<int64_t>(), total);
  // A strided copy reading past 2^31.
  Tensor sparse = x.slice(0, 1, n, 64).contiguous();
  ASSERT_EQ(sparse.numel(), (n - 1 + 63) / 64);
  EXPECT_EQ(values(sparse.slice(0, sparse.numel() - 1, sparse.numel())),
            values(x.slice(0, 1 + (sparse.numel() - 1) * 64, 2 + (sparse.numel() - 1) * 64)));
  // A cat whose result passes 2^31 elements.
  Tensor both = cat({full({3}, 9, DType::U8, kGpu), x});
  ASSERT_EQ(both.numel(), n + 3);
  EXPECT_EQ(values(both.slice(0, 0, 5)), (std::vector<int64_t>{9, 9, 9, 4, step == 1 ? 4 : 3}));
  EXPECT_EQ(values(both.slice(0, n - 2, n + 3)), values(x.slice(0, n - 5, n)));
  EXPECT_EQ(sum(both).item<int64_t>(), total + 27);
}

}  // namespace
}  // namespace kiln
