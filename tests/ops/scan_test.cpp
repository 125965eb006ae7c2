// tests/ops/scan_test.cpp -- cumsum, sort, argsort and topk through the public API: the
// values beside the indices, ties and NaN, torch's dtypes, 0-d and empty tensors, the traced
// form against eager, and the errors. Each op's reference on every dtype and device is its Spec
// (tests/ops/op_specs.h, run by tests/every_op).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}

TEST(Sort, GivesValuesAndTheirStablePositions) {
  Tensor x = from_vector(std::vector<double>{3, 1, kNaN, 1, -2, 3}, {2, 3});
  auto [v, i] = sort(x);  // along the last dim
  expect_close(i, {1, 0, 2, 1, 0, 2}, 0, 0);
  expect_close(v, {1, 3, kNaN, -2, 1, 3}, 0, 0);
  auto [vd, id] = sort(x, 1, /*descending=*/true);
  expect_close(id, {2, 0, 1, 2, 0, 1}, 0, 0);  // NaN first, ties in index order
  expect_close(vd, {kNaN, 3, 1, 3, 1, -2}, 0, 0);
  expect_close(argsort(x, 0), {1, 1, 1, 0, 0, 0}, 0, 0);  // NaN above 3 in the last column
  EXPECT_EQ(i.dtype(), DType::I64);
  EXPECT_EQ(v.dtype(), DType::F64);
}

TEST(Sort, KeepsBoolAndIntegerDtypesAndHandlesEdges) {
  auto [bv, bi] = sort(from_vector(std::vector<int64_t>{1, 0, 1, 0}).to(DType::Bool));
  EXPECT_EQ(bv.dtype(), DType::Bool);
  expect_close(bi, {1, 3, 0, 2}, 0, 0);
  auto [sv, si] = sort(scalar_tensor(4.0));
  EXPECT_EQ(sv.dim(), 0);
  expect_close(si, {0}, 0, 0);
  auto [ev, ei] = sort(zeros({3, 0}));
  EXPECT_EQ(ei.shape(), (Dims{3, 0}));
  expect_error([] { sort(randn({2, 3}), 2); }, {"argsort", "dim"});
}

TEST(Topk, GivesTheLargestOrSmallestKInOrder) {
  Tensor x = from_vector(std::vector<double>{5, 1, 5, 9, kNaN, 2, 0, 7}, {2, 4});
  auto [v, i] = topk(x, 2);
  expect_close(i, {3, 0, 0, 3}, 0, 0);  // NaN is the largest; of the tied 5s, index 0
  expect_close(v, {9, 5, kNaN, 7}, 0, 0);
  auto [sv, si] = topk(x, 3, 1, /*largest=*/false);
  expect_close(si, {1, 0, 2, 2, 1, 3}, 0, 0);
  expect_close(sv, {1, 5, 5, 0, 2, 7}, 0, 0);
  auto [cv, ci] = topk(x, 1, 0);
  expect_close(ci, {1, 1, 0, 0}, 0, 0);  // NaN is the largest of its column
  EXPECT_EQ(std::get<1>(topk(x, 0)).shape(), (Dims{2, 0}));
  // The same as the first k of sort, on ties everywhere.
  Tensor ties = randint(0, 3, {6, 40}).to(DType::F32);
  auto [tv, ti] = topk(ties, 7);
  auto [all_v, all_i] = sort(ties, -1, true);
  expect_close(ti, all_i.slice(1, 0, 7).contiguous().to_vector<double>(), 0, 0);
  expect_close(tv, all_v.slice(1, 0, 7).contiguous().to_vector<double>(), 0, 0);
}

TEST(Topk, RefusesAKBeyondTheDim) {
  expect_error([] { topk(randn({2, 3}), 4); }, {"topk", "k = 4", "f32[2,3]", "size 3"});
  expect_error([] { topk(randn({2, 3}), -1); }, {"topk", "k = -1"});
  expect_error([] { topk(randn({2, 3}), 1, 5); }, {"topk", "dim"});
}

TEST(Cumsum, FollowsTorchDtypesAndSumsHalvesInF32) {
  Tensor x = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor c = cumsum(x.to(DType::I32), 1);
  EXPECT_EQ(c.dtype(), DType::I64);  // integers and bool give i64, as torch
  expect_close(c, {1, 3, 6, 4, 9, 15}, 0, 0);
  expect_close(cumsum(x, 0), {1, 2, 3, 5, 7, 9}, 0, 0);
  EXPECT_EQ(cumsum(x.to(DType::Bool), 0).dtype(), DType::I64);
  Tensor f = cumsum(x, 1, DType::F32);
  EXPECT_EQ(f.dtype(), DType::F32);
  // 2048 + 1 + 1 ... in f16 sums to 2048 when each step rounds in f16, but f32 holds the sum.
  Tensor h = cat({full({1}, 2048, DType::F16), ones({8}, DType::F16)});
  EXPECT_EQ(cumsum(h, 0).to_vector<double>().back(), 2056);
  expect_close(cumsum(scalar_tensor(2.5), 0), {2.5}, 0, 0);
  EXPECT_EQ(cumsum(zeros({0, 4}), 0).shape(), (Dims{0, 4}));
  expect_error([] { cumsum(randn({2, 3}), 2); }, {"cumsum", "dim"});
}

TEST(Scans, TracedMatchEagerAndDifferentiate) {
  Tensor x = randn({4, 6}, DType::F64);
  auto f = [](Tensor a) {
    auto [v, i] = topk(a, 3, 1);
    return cumsum(v, 1) + sum(std::get<0>(sort(a, 0)), {1}, true) + i.to(DType::F64);
  };
  jit::Function g = jit::trace(f, {x});
  expect_close(g(x), f(x).to_vector<double>(), 1e-12, 1e-12);
  Tensor p = x.detach().clone().requires_grad_();
  EXPECT_EQ(autograd::gradcheck([&](std::span<const Tensor> in) { return f(in[0]); }, std::vector<Tensor>{p}), "");
}

TEST(Multinomial, DrawsWithReplacementInProportionToTheWeights) {
  manual_seed(7);
  Tensor w = from_vector(std::vector<double>{1, 0, 3, 4});  // need not sum to one
  const int64_t n = 40000;
  Tensor s = multinomial(w, n, /*replacement=*/true);
  EXPECT_EQ(s.dtype(), DType::I64);
  EXPECT_EQ(s.shape(), (Dims{n}));
  std::vector<double> count(4);
  for (double v : s.to_vector<double>()) count[static_cast<size_t>(v)] += 1;
  EXPECT_EQ(count[1], 0);  // a zero weight is never drawn
  for (size_t j = 0; j < 4; ++j) {
    double p = w.to_vector<double>()[j] / 8, sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(count[j], n * p, 5 * sd + 1) << "category " << j;
  }
}

TEST(Multinomial, DrawsWithoutReplacementInTheOrderOfSequentialDraws) {
  manual_seed(8);
  Tensor w = from_vector(std::vector<double>{0.5, 0.3, 0.2, 0.0, 1.0}, {1, 5});
  const int64_t rows = 20000;
  Tensor s = multinomial(w.expand({rows, 5}).contiguous(), 3);
  EXPECT_EQ(s.shape(), (Dims{rows, 3}));
  std::vector<double> v = s.to_vector<double>();
  std::vector<double> first(5), second_after_4(5);
  double after_4 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* d = &v[static_cast<size_t>(r * 3)];
    EXPECT_TRUE(d[0] != d[1] && d[1] != d[2] && d[0] != d[2]) << "row " << r << " repeats a category";
    EXPECT_NE(d[0], 3);
    first[static_cast<size_t>(d[0])] += 1;
    if (d[0] == 4) after_4 += 1, second_after_4[static_cast<size_t>(d[1])] += 1;
  }
  // The first draw is in proportion to the weights (total 2); the second, given that category
  // 4 went first, in proportion to what remains (total 1).
  for (size_t j = 0; j < 5; ++j) {
    double p = w.to_vector<double>()[j] / 2, sd = std::sqrt(rows * p * (1 - p));
    EXPECT_NEAR(first[j], rows * p, 5 * sd + 1) << "category " << j;
    double q = j == 4 ? 0 : w.to_vector<double>()[j], sq = std::sqrt(after_4 * q * (1 - q));
    EXPECT_NEAR(second_after_4[j], after_4 * q, 5 * sq + 1) << "second draw, category " << j;
  }
}

TEST(Multinomial, RefusesWhatTorchRefuses) {
  expect_error(
      [] {
        multinomial(from_vector(std::vector<double>{1, 2}), 3);
      },
      {"multinomial", "3 samples", "2 categories"});
  expect_error([] { multinomial(from_vector(std::vector<double>{1, 0, 0}), 2); }, {"multinomial", "1 non-zero"});
  expect_error([] { multinomial(from_vector(std::vector<double>{1, -1}), 1, true); }, {"multinomial", "non-negative"});
  expect_error([] { multinomial(zeros({2, 3}, DType::F64), 1, true); }, {"multinomial", "sums to 0"});
  expect_error([] { multinomial(ones({3}, DType::I64), 1); }, {"multinomial", "float", "i64[3]"});
  expect_error([] { multinomial(ones({3}), 0); }, {"multinomial", "positive"});
}
