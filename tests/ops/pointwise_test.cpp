// tests/ops/pointwise_test.cpp -- every pointwise op against a double-precision reference, in
// every dtype it accepts, and the error for every dtype it does not.
#include <optional>

#include "tests/ops/pointwise_cases.h"

namespace kiln::test {
namespace {

const Dims kPointwiseShape = {7, 33};  // 231 elements: whole vectors of every width, and a tail

class Unary : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(Unary, MatchesReferenceInEveryDType) {
  const UnaryCase& c = GetParam();
  manual_seed(11);
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor x = values(kPointwiseShape, t, c.lo, c.hi);
    if (!accepts(c.id, t)) {
      EXPECT_TRUE(throws_error([&] { c.fn(x); }, {op_name(c.id), dname(t)}));
      continue;
    }
    Tensor y = c.fn(x);
    DType out = result_dtype(c.id, t);
    EXPECT_EQ(y.dtype(), out);
    EXPECT_TRUE(all_close(y, unary_ref(c, x.to_vector<double>(), out), kPointwiseShape));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, Unary, ::testing::ValuesIn(unary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

class Binary : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(Binary, MatchesReferenceInEveryDType) {
  const BinaryCase& c = GetParam();
  manual_seed(12);
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor a = values(kPointwiseShape, t, c.lo, c.hi, c.whole);
    Tensor b = values(kPointwiseShape, t, c.lo_b, c.hi_b, c.whole);
    if (!accepts(c.id, t)) {
      EXPECT_TRUE(throws_error([&] { c.fn(a, b); }, {op_name(c.id), dname(t)}));
      continue;
    }
    Tensor y = c.fn(a, b);
    DType out = result_dtype(c.id, t);
    EXPECT_EQ(y.dtype(), out);
    EXPECT_TRUE(all_close(y, binary_ref(c, a.to_vector<double>(), b.to_vector<double>(), out), kPointwiseShape));
  }
}

// Operands of two dtypes promote as in NumPy/PyTorch before the op runs.
TEST_P(Binary, PromotesMixedDTypes) {
  const BinaryCase& c = GetParam();
  struct Mix {
    DType a, b, common;
  };
  const Mix mixes[] = {{i32, f16, f16}, {u8, i32, i32},    {f16, bf16, f32}, {boolean, i64, i64},
                       {f32, f64, f64}, {u8, boolean, u8}, {i64, f32, f32},  {bf16, i32, bf16}};
  manual_seed(13);
  for (const Mix& m : mixes) {
    SCOPED_TRACE(dname(m.a) + " with " + dname(m.b));
    Tensor a = values(kPointwiseShape, m.a, c.lo, c.hi, c.whole);
    Tensor b = values(kPointwiseShape, m.b, c.lo_b, c.hi_b, c.whole);
    if (!accepts(c.id, m.common)) {
      EXPECT_TRUE(throws_error([&] { c.fn(a, b); }, {op_name(c.id)}));
      continue;
    }
    Tensor y = c.fn(a, b);
    DType out = result_dtype(c.id, m.common);
    EXPECT_EQ(y.dtype(), out);
    EXPECT_TRUE(all_close(y, binary_ref(c, a.to_vector<double>(), b.to_vector<double>(), out), kPointwiseShape));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, Binary, ::testing::ValuesIn(binary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Where, PicksByConditionInEveryDType) {
  manual_seed(14);
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor c = uniform(kPointwiseShape, boolean, 0, 1);
    Tensor a = values(kPointwiseShape, t, -10, 10), b = values(kPointwiseShape, t, -10, 10);
    Tensor y = where(c, a, b);
    EXPECT_EQ(y.dtype(), t);
    std::vector<double> cv = c.to_vector<double>(), av = a.to_vector<double>(), bv = b.to_vector<double>(),
                        want(cv.size());
    for (size_t i = 0; i < cv.size(); ++i) want[i] = cv[i] != 0 ? av[i] : bv[i];
    EXPECT_TRUE(all_close(y, want, kPointwiseShape, {0, 0}));
  }
}

TEST(Where, PromotesItsValueOperandsAndBroadcastsAllThree) {
  manual_seed(15);
  Tensor c = uniform({4, 1}, boolean, 0, 1);
  Tensor a = values({3}, i32, -10, 10), b = values({4, 3}, f16, -10, 10);
  Tensor y = where(c, a, b);
  EXPECT_EQ(y.dtype(), f16);
  std::vector<double> cv = broadcast_values(c.to_vector<double>(), {4, 1}, {4, 3});
  std::vector<double> av = broadcast_values(a.to_vector<double>(), {3}, {4, 3});
  std::vector<double> bv = b.to_vector<double>(), want(12);
  for (size_t i = 0; i < 12; ++i) want[i] = cv[i] != 0 ? av[i] : bv[i];
  EXPECT_TRUE(all_close(y, want, {4, 3}));
}

double clamp_ref(double x, double lo, double hi) { return std::isnan(x) ? x : std::min(std::max(x, lo), hi); }

TEST(Clamp, MatchesReferenceWithTensorBoundsInEveryDType) {
  manual_seed(16);
  for (DType t : kAllDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor x = values(kPointwiseShape, t, -10, 10);
    Tensor lo = values(kPointwiseShape, t, -5, 0), hi = values(kPointwiseShape, t, 0, 5);
    if (!accepts(OpId::Clamp, t)) {
      EXPECT_TRUE(throws_error([&] { clamp(x, lo, hi); }, {"clamp", dname(t)}));
      continue;
    }
    Tensor y = clamp(x, lo, hi);
    EXPECT_EQ(y.dtype(), t);
    std::vector<double> xv = x.to_vector<double>(), lv = lo.to_vector<double>(), hv = hi.to_vector<double>(),
                        want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = clamp_ref(xv[i], lv[i], hv[i]);
    EXPECT_TRUE(all_close(y, want, kPointwiseShape));
  }
}

TEST(Clamp, MissingBoundIsSkippedAndHighWinsWhenBoundsCross) {
  manual_seed(17);
  double inf = INFINITY;
  for (DType t : {f32, f64, f16, bf16, i32, i64, u8}) {
    SCOPED_TRACE(dname(t));
    Tensor x = values(kPointwiseShape, t, -100, 100);
    std::vector<double> xv = x.to_vector<double>();
    auto check = [&](std::optional<Scalar> lo, std::optional<Scalar> hi, double l, double h) {
      Tensor y = clamp(x, lo, hi);
      EXPECT_EQ(y.dtype(), t);
      EXPECT_TRUE(all_close(y, map(xv, [&](double v) { return clamp_ref(v, l, h); }), kPointwiseShape));
    };
    check(3, std::nullopt, 3, inf);
    check(std::nullopt, 7, -inf, 7);
    check(2, 50, 2, 50);
    check(9, 4, 9, 4);  // lo > hi: everything becomes hi
  }
  // A float bound on an integer tensor computes in f32.
  Tensor xi = values(kPointwiseShape, i32, -10, 10);
  Tensor y = clamp(xi, -2.5, std::nullopt);
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_TRUE(all_close(y, map(xi.to_vector<double>(), [](double v) { return std::max(v, -2.5); }), kPointwiseShape));
}

TEST(Round, RoundsHalfToEvenInEveryFloatDType) {
  std::vector<double> v = {-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 0.25, -0.75, 1023.5, -6.5};
  for (DType t : kFloatDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor x = from_vector(v).to(t);
    EXPECT_TRUE(all_close(round(x), map(x.to_vector<double>(), [](double a) { return std::nearbyint(a); }),
                          {static_cast<int64_t>(v.size())}, {0, 0}));
  }
}

TEST(Pow, NegativeBaseWithWholeExponent) {
  manual_seed(18);
  for (DType t : {f32, f64}) {
    SCOPED_TRACE(dname(t));
    Tensor x = values(kPointwiseShape, t, -4, 4);
    std::vector<double> xv = x.to_vector<double>();
    for (double e : {2.0, 3.0, -1.0, -2.0}) {
      SCOPED_TRACE(e);
      EXPECT_TRUE(all_close(pow(x, e), map(xv, [&](double a) { return std::pow(a, e); }), kPointwiseShape));
      Tensor et = full({}, e, t);
      EXPECT_TRUE(all_close(pow(x, et), map(xv, [&](double a) { return std::pow(a, e); }), kPointwiseShape));
    }
  }
}

}  // namespace
}  // namespace kiln::test
