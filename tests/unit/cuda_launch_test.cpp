// tests/unit/cuda_launch_test.cpp -- the launches of generated CUDA kernels
// (codegen/cuda/launch.h), read without a GPU for an H100's or H200's 132 multiprocessors:
// which rows a block or a thread takes, when columns are cut into parts, and that work of a
// million elements or more gets at least two blocks per multiprocessor.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/launch.h"
#include "runtime/error.h"

namespace kiln::codegen {
namespace {

constexpr int kSms = 132;

CudaLaunch plan(std::vector<int64_t> sizes, uint32_t reduced, CudaWork work = CudaWork::Partials, int sms = kSms) {
  KernelLayout L;
  L.rank = static_cast<int>(sizes.size());
  L.reduced = reduced;
  return plan_cuda_launch(L, sizes, sms, work);
}

TEST(CudaLaunch, ElementwiseKernelsTakeAThreadPerElementUpTo32BlocksPerMultiprocessor) {
  EXPECT_EQ(plan({1000}, 0, CudaWork::Elements).blocks, 4);
  EXPECT_EQ(plan({64, 256, 3136}, 0, CudaWork::Elements).blocks, 32 * kSms);
  EXPECT_EQ(plan({0, 5}, 0, CudaWork::Elements).blocks, 0);
  EXPECT_EQ(plan({1}, 0, CudaWork::Elements).blocks, 1);
}

TEST(CudaLaunch, EachReductionLayoutLaunchesAsDocumented) {
  // Batch norm's statistics, [N, C, H*W] to [C] (a kept middle dim): a block per channel's
  // chunk, the channels cut into parts until the device has 2 blocks per multiprocessor.
  CudaLaunch bn = plan({64, 256, 56 * 56}, 0b101);
  EXPECT_EQ(bn.rows_by, CudaRows::Block);
  EXPECT_EQ(bn.rows, 256);
  EXPECT_EQ(bn.cols, 64 * 56 * 56);
  EXPECT_GT(bn.parts, 1);
  EXPECT_GE(bn.blocks, 2 * kSms);
  // Softmax over GPT-2's [B*H*T, T] scores: a block per row, as many rows as there are.
  CudaLaunch softmax = plan({8 * 12 * 1024, 1024}, 0b10, CudaWork::Rows);
  EXPECT_EQ(softmax.rows_by, CudaRows::Block);
  EXPECT_EQ(softmax.parts, 1);
  EXPECT_EQ(softmax.blocks, 32 * kSms);
  // A few rows of a huge length: cut into parts of at least 2048 elements.
  CudaLaunch few = plan({2, 50'000'000}, 0b10);
  EXPECT_EQ(few.rows_by, CudaRows::Block);
  EXPECT_GE(few.blocks, 2 * kSms);
  EXPECT_GE(few.chunk, 2048);
  // Many rows of 3: a thread each.
  CudaLaunch tiny = plan({4'000'000, 3}, 0b10);
  EXPECT_EQ(tiny.rows_by, CudaRows::Thread);
  EXPECT_EQ(tiny.parts, 1);
  EXPECT_EQ(tiny.blocks, 32 * kSms);
  // The bias gradient, [B*T, 768] to [768] (a kept innermost dim): a thread per column, so a
  // warp reads 32 neighbours, with the rows cut into parts.
  CudaLaunch bias = plan({8192, 768}, 0b01);
  EXPECT_EQ(bias.rows_by, CudaRows::Thread);
  EXPECT_GT(bias.parts, 1);
  EXPECT_GE(bias.blocks, 2 * kSms);
  // A group that reads a reduction's result (a variance) keeps its rows whole.
  CudaLaunch var = plan({64, 256, 56 * 56}, 0b101, CudaWork::Rows);
  EXPECT_EQ(var.parts, 1);
  EXPECT_EQ(var.blocks, 256);
}

TEST(CudaLaunch, EmptyReducedDimsStillLaunchAndEmptyOutputsDoNot) {
  CudaLaunch empty_cols = plan({0, 5}, 0b01);  // sum over a dim of 0: every output written
  EXPECT_EQ(empty_cols.rows, 5);
  EXPECT_EQ(empty_cols.cols, 0);
  EXPECT_GE(empty_cols.blocks, 1);
  EXPECT_EQ(empty_cols.parts, 1);
  EXPECT_EQ(plan({4, 0}, 0b01).blocks, 0);  // no outputs
}

// Any sizes, any reduced dims: the parts cover the columns once, no part is empty, the grid
// stays within 32 blocks per multiprocessor, and work of 2^20 elements or more whose columns
// may be cut gets at least 2 blocks per multiprocessor.
TEST(CudaLaunch, BigWorkFillsTheDeviceForAnySizes) {
  std::mt19937_64 rng(5);
  for (int sms : {4, 108, 132}) {
    for (int trial = 0; trial < 20000; ++trial) {
      int rank = 1 + static_cast<int>(rng() % 4);
      std::vector<int64_t> sizes;
      int64_t work = 1;
      bool fits = true;  // at most 2^34 elements, so no product overflows
      for (int d = 0; d < rank; ++d) {
        int64_t s = static_cast<int64_t>(std::exp2(static_cast<double>(rng() % 2200) / 100.0));  // 1 .. 4M
        sizes.push_back(s);
        fits = fits && work <= (int64_t{1} << 34) / s;
        if (fits) work *= s;
      }
      if (!fits) continue;
      uint32_t reduced = static_cast<uint32_t>(rng() % (1u << rank));
      if (reduced == 0) reduced = 1;
      CudaLaunch c = plan(sizes, reduced, CudaWork::Partials, sms);
      SCOPED_TRACE(::testing::PrintToString(sizes) + " reduced " + std::to_string(reduced));
      ASSERT_EQ(c.rows * c.cols, work);
      ASSERT_GE(c.parts, 1);
      ASSERT_GE(c.parts * c.chunk, c.cols);
      ASSERT_LT((c.parts - 1) * c.chunk, std::max<int64_t>(c.cols, 1));
      ASSERT_LE(c.blocks, int64_t{32} * sms);
      if (work >= kFillWork) {
        ASSERT_GE(c.blocks, 2 * sms);
      }
      CudaLaunch whole = plan(sizes, reduced, CudaWork::Rows, sms);
      ASSERT_EQ(whole.parts, 1);
      ASSERT_EQ(whole.rows_by, c.rows_by);
    }
  }
}

// The band random sizes miss: work just past 2^20 elements at every row count that wants its
// columns cut, for both layouts (257 to 263 rows of 3,988 to 4,095 columns once got a block
// per row, under 2 per multiprocessor).
TEST(CudaLaunch, WorkJustPastAMillionFillsTheDeviceAtEveryRowCount) {
  for (int sms : {4, 108, 132}) {
    for (int64_t rows = 1; rows <= int64_t{2} * sms * kCudaBlock + 64; ++rows) {
      const int64_t cols = (kFillWork + rows - 1) / rows;
      SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(cols) + ", " + std::to_string(sms) + " SMs");
      if (rows <= 4 * sms) {  // a block a row
        ASSERT_GE(plan({rows, cols}, 0b10, CudaWork::Partials, sms).blocks, 2 * sms);
      }
      ASSERT_GE(plan({cols, rows}, 0b01, CudaWork::Partials, sms).blocks, 2 * sms);  // a thread a row
    }
  }
  CudaLaunch band = plan({260, 4033}, 0b10);
  EXPECT_EQ(band.parts, 2);
  EXPECT_EQ(band.blocks, 520);
}

// The multiplier that replaces a kernel's division by a size: n / d for every n below 2^31 the
// kernel can meet (the edges of each power of two, and random ones), each d below 2^31.
TEST(CudaLaunch, DivisorsDivideEveryIndexBelow2To31) {
  auto div = [](uint32_t n, uint64_t w) {
    const uint32_t magic = static_cast<uint32_t>(w), shift = static_cast<uint32_t>(w >> 32);
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
    return (hi + n) >> shift;  // the kernel's unsigned arithmetic (hi + n < 2^32)
  };
  std::mt19937_64 rng(5);
  std::vector<uint32_t> divisors = {1, 2, 3, 5, 7, 56, 3136, 50257, 65535, 65536, 65537, (1u << 31) - 1};
  for (int k = 0; k < 200; ++k) divisors.push_back(1 + static_cast<uint32_t>(rng() % ((1u << 31) - 1)));
  for (uint32_t d : divisors) {
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, (1u << 31) - 1, (1u << 31) - 2};
    for (int b = 1; b < 31; ++b) ns.insert(ns.end(), {(1u << b) - 1, 1u << b, (1u << b) + 1});
    for (int k = 0; k < 200; ++k) ns.push_back(static_cast<uint32_t>(rng() % (1u << 31)));
    const uint64_t w = cuda_divisor(d);
    for (uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      ASSERT_EQ(div(n, w), n / d) << n << " / " << d;
    }
  }
}

// A kernel indexes in 32 bits when every offset and loop index fits, and keeps 64 bits past
// 2^31 elements, a stride that large, or partial results that reach it.
TEST(CudaLaunch, KernelsIndexIn32BitsWhenEveryOffsetFits) {
  auto fits = [](std::vector<int64_t> sizes, std::vector<int64_t> strides, CudaWork work = CudaWork::Elements) {
    CudaLaunch l = plan(sizes, work == CudaWork::Elements ? 0 : 1u << (sizes.size() - 1), work);
    return index32_fits(sizes, strides, l);
  };
  EXPECT_TRUE(fits({64, 256, 3136}, {802816, 3136, 1, 802816, 3136, 1}));
  EXPECT_TRUE(fits({1}, {1, 1}));
  EXPECT_TRUE(fits({0, 5}, {5, 1, 5, 1}));
  EXPECT_FALSE(fits({int64_t{1} << 31}, {1, 1})) << "2^31 elements";
  EXPECT_FALSE(fits({3, 4}, {int64_t{1} << 30, 1, 4, 1})) << "an input whose last element lies past 2^31";
  EXPECT_TRUE(fits({3, 4}, {int64_t{1} << 28, 1, 4, 1}));
  EXPECT_FALSE(fits({(int64_t{1} << 31) - 64}, {1, 1})) << "the loop's last turns pass 2^31";
  EXPECT_TRUE(fits({1 << 20, 1024}, {1024, 1, 1, 0}, CudaWork::Partials));
  EXPECT_FALSE(fits({1 << 21, 1024}, {1024, 1, 1, 0}, CudaWork::Partials));
}

// A batch kernel's arguments (emit.h, pack_cuda_batch): the segments' structs in order, zeros
// in the unused slots, then the count and each segment's first block (the grid past the last),
// two to a word; the whole fits CUDA 12.1's 32764 bytes at the capacity cuda_batch_capacity gives.
TEST(CudaLaunch, ABatchsArgumentsHoldEachSegmentAndItsFirstBlock) {
  std::vector<std::vector<uint64_t>> segments = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}};
  std::vector<uint64_t> w = pack_cuda_batch(segments, {2, 1, 5}, 4);
  // 4 slots of 3 words, then count, first[0..4] as six u32: three words.
  ASSERT_EQ(w.size(), 4u * 3 + 3);
  EXPECT_EQ(std::vector<uint64_t>(w.begin(), w.begin() + 12),
            (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0}));
  EXPECT_EQ(w[12], 3u | uint64_t{0} << 32) << "count 3, first[0] 0";
  EXPECT_EQ(w[13], 2u | uint64_t{3} << 32) << "first[1] 2, first[2] 3";
  EXPECT_EQ(w[14], 8u | uint64_t{8} << 32) << "first[3] the grid, and first[4] too";
  for (size_t words : {4, 28, 100}) {
    int c = cuda_batch_capacity(words);
    size_t bytes = (words * 8) * static_cast<size_t>(c) + 4 * (static_cast<size_t>(c) + 2);
    EXPECT_LE((bytes + 7) / 8 * 8, kCudaMaxArgBytes) << words << " words a segment";
    EXPECT_GT((bytes + words * 8 + 4 + 7) / 8 * 8, kCudaMaxArgBytes) << "one more would not fit";
  }
  EXPECT_EQ(cuda_batch_capacity(28), 143) << "an Adam update's segment (12 operands, rank 1)";
  EXPECT_THROW(pack_cuda_batch(segments, {2, 0, 5}, 4), Error) << "a segment without blocks";
  EXPECT_THROW(pack_cuda_batch(segments, {2, 1, 5}, 2), Error) << "more segments than slots";
  EXPECT_THROW(pack_cuda_batch({{1, 2}, {3}}, {1, 1}, 2), Error) << "segments of two layouts";
}

}  // namespace
}  // namespace kiln::codegen
