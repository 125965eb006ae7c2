// tests/ops/pointwise_special_test.cpp -- NaN, infinities and signed zeros through every
// pointwise op, and the errors pointwise ops raise.
#include "tests/ops/pointwise_cases.h"

namespace kiln::test {
namespace {

const std::vector<double> kSpecial = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0};

// Zeros must carry the reference's sign (abs(-0) is +0, floor(-0) is -0).
::testing::AssertionResult same_zero_signs(const Tensor& got, const std::vector<double>& want) {
  std::vector<double> g = got.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] == 0 && want[i] == 0 && std::signbit(g[i]) != std::signbit(want[i]))
      return ::testing::AssertionFailure() << "[" << i << "] got " << g[i] << ", expected " << want[i];
  return ::testing::AssertionSuccess();
}

class UnarySpecial : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnarySpecial, NanInfinityAndSignedZero) {
  const UnaryCase& c = GetParam();
  for (DType t : kFloatDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor x = from_vector(kSpecial).to(t);
    std::vector<double> want = unary_ref(c, x.to_vector<double>(), result_dtype(c.id, t));
    Tensor y = c.fn(x);
    EXPECT_TRUE(all_close(y, want, x.shape()));
    if (c.id != OpId::Relu) {  // relu(-0) may be either zero
      EXPECT_TRUE(same_zero_signs(y, want));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, UnarySpecial, ::testing::ValuesIn(unary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

class BinarySpecial : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinarySpecial, EveryPairOfSpecialValues) {
  const BinaryCase& c = GetParam();
  int64_t n = static_cast<int64_t>(kSpecial.size());
  std::vector<double> a, b;
  for (double u : kSpecial)
    for (double v : kSpecial) {
      a.push_back(u);
      b.push_back(v);
    }
  for (DType t : kFloatDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor x = from_vector(a, {n, n}).to(t), y = from_vector(b, {n, n}).to(t);
    EXPECT_TRUE(all_close(c.fn(x, y), binary_ref(c, a, b, result_dtype(c.id, t)), {n, n}));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, BinarySpecial, ::testing::ValuesIn(binary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Special, NanPropagatesThroughMaximumMinimumReluAndClamp) {
  for (DType t : kFloatDTypes) {
    SCOPED_TRACE(dname(t));
    Tensor nan = full({37}, NAN, t), one = full({37}, 1.0, t);
    for (const Tensor& y :
         {maximum(nan, one), maximum(one, nan), minimum(nan, one), minimum(one, nan), maximum(one, NAN),
          minimum(nan, 1.0), relu(nan), clamp(nan, -1.0, 1.0), clamp(nan, one, one), clamp(nan, std::nullopt, 0.0)})
      EXPECT_TRUE(all_close(y, std::vector<double>(37, NAN), {37}));
  }
}

TEST(Special, ClampSaturatesInfinities) {
  std::vector<double> v = {INFINITY, -INFINITY, 0.5, NAN};
  Tensor x = from_vector(v);
  auto ref = [](double a) { return std::isnan(a) ? a : std::min(std::max(a, -1.0), 1.0); };
  EXPECT_TRUE(all_close(clamp(x, -1.0, 1.0), map(v, ref), {4}));
}

// ---- errors: kiln::Error naming the op and the operands' types --------------------------

TEST(PointwiseErrors, ShapesThatDoNotBroadcastNameTheOpAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  EXPECT_TRUE(throws_error([&] { return add(a, b); }, {"add", "[2,3]", "[4]"}));
  EXPECT_TRUE(throws_error([&] { return a + b; }, {"add", "[2,3]", "[4]"}));
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(throws_error([&] { return c.fn(a, b); }, {op_name(c.id), "[2,3]", "[4]"}));
    EXPECT_TRUE(throws_error(
        [&] {
          return c.fn(zeros({3, 1, 5}), zeros({4, 3}));
        },
        {op_name(c.id), "[3,1,5]", "[4,3]"}));
  }
  Tensor c = zeros({2, 3}, boolean);
  EXPECT_TRUE(throws_error([&] { return where(c, a, b); }, {"where", "[2,3]", "[4]"}));
  EXPECT_TRUE(throws_error([&] { return clamp(a, b, a); }, {"clamp", "[2,3]", "[4]"}));
}

TEST(PointwiseErrors, WhereNeedsABoolCondition) {
  Tensor a = zeros({2, 3}), b = ones({2, 3});
  EXPECT_TRUE(throws_error([&] { return where(a, a, b); }, {"where", "bool", "f32[2,3]"}));
  EXPECT_TRUE(throws_error([&] { return where(zeros({2, 3}, i32), 1.0, b); }, {"where", "bool", "i32[2,3]"}));
  EXPECT_TRUE(throws_error([&] { return where(zeros({2, 3}, u8), 1, 2); }, {"where", "bool", "u8[2,3]"}));
}

TEST(PointwiseErrors, ArithmeticOnBoolIsRejected) {
  Tensor t = ones({2, 3}, boolean);
  EXPECT_TRUE(throws_error([&] { return neg(t); }, {"neg", "bool"}));
  EXPECT_TRUE(throws_error([&] { return -t; }, {"neg", "bool"}));
  EXPECT_TRUE(throws_error([&] { return sub(t, t); }, {"sub", "bool"}));
  EXPECT_TRUE(throws_error([&] { return t - t; }, {"sub", "bool"}));
  EXPECT_TRUE(throws_error([&] { return t - true; }, {"sub", "bool"}));
  EXPECT_TRUE(throws_error([&] { return abs(t); }, {"abs", "bool"}));
  EXPECT_TRUE(throws_error([&] { return clamp(t, t, t); }, {"clamp", "bool"}));
}

TEST(PointwiseErrors, GeluRejectsAnUnknownApproximation) {
  EXPECT_TRUE(throws_error([] { return gelu(zeros({2}), "tanhh"); }, {"gelu", "tanhh"}));
  EXPECT_TRUE(throws_error([] { return gelu(zeros({2}), ""); }, {"gelu"}));
}

TEST(PointwiseErrors, ClampNeedsABound) {
  EXPECT_TRUE(throws_error([] { return clamp(zeros({2}), std::nullopt, std::nullopt); }, {"clamp"}));
}

TEST(PointwiseErrors, UndefinedTensorsAndBadCasts) {
  Tensor undefined;
  EXPECT_TRUE(throws_error([&] { return exp(undefined); }, {"exp", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return add(zeros({2}), undefined); }, {"add", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return clamp(undefined, 0.0, 1.0); }, {"clamp", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return cast(undefined, f32); }, {"cast", "undefined"}));
  EXPECT_TRUE(throws_error([] { return cast(zeros({2}), static_cast<DType>(kNumDTypes)); }, {"cast", "dtype"}));
}

TEST(Cast, ConvertsBetweenEveryPairOfDTypes) {
  // Whole numbers in [0, 100] exist exactly in every dtype; bool is "nonzero".
  manual_seed(41);
  Tensor src = uniform({3, 29}, i64, 0, 100);
  std::vector<double> v = src.to_vector<double>();
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(dname(from) + " to " + dname(to));
      Tensor x = src.to(from);
      std::vector<double> xv = x.to_vector<double>();
      Tensor y = cast(x, to);
      EXPECT_EQ(y.dtype(), to);
      EXPECT_TRUE(all_close(y, map(xv, [&](double a) { return stored_as(to, a); }), {3, 29}, {0, 0}));
      Tensor yt = cast(x.t(), to);  // strided source
      EXPECT_TRUE(
          all_close(yt, view_values(x.t(), map(xv, [&](double a) { return stored_as(to, a); })), {29, 3}, {0, 0}));
    }
}

TEST(Cast, FloatToIntegerTruncatesSaturatesAndMapsNanToZero) {
  std::vector<double> v = {2.7, -2.7, 0.5, -0.5, 1e10, -1e10, NAN, INFINITY, -INFINITY, 255.9, 300};
  const int64_t n = static_cast<int64_t>(v.size());
  auto sat = [](double a, double lo, double hi) {
    return std::isnan(a) ? 0.0 : std::min(std::max(std::trunc(a), lo), hi);
  };
  for (DType from : kFloatDTypes) {  // f16 and bf16 too: 1e10 is inf there
    SCOPED_TRACE(dname(from));
    Tensor x = from_vector(v).to(from);
    std::vector<double> xv = x.to_vector<double>();
    for (DType to : {i32, u8}) {
      SCOPED_TRACE(dname(to));
      double lo = to == i32 ? INT32_MIN : 0, hi = to == i32 ? INT32_MAX : 255;
      EXPECT_TRUE(all_close(cast(x, to), map(xv, [&](double a) { return sat(a, lo, hi); }), {n}, {0, 0}));
    }
    // i64 exactly, as integers: its largest value has no double.
    std::vector<int64_t> got = cast(x, i64).to_vector<int64_t>();
    for (size_t i = 0; i < xv.size(); ++i) {
      double a = xv[i];
      int64_t want = std::isnan(a) ? 0 : a >= 0x1p63 ? INT64_MAX : a <= -0x1p63 ? INT64_MIN : static_cast<int64_t>(a);
      EXPECT_EQ(got[i], want) << "element " << i << " = " << a;
    }
    EXPECT_TRUE(all_close(cast(x, boolean), map(xv, [](double a) { return double(a != 0); }), {n}, {0, 0}));
  }
}

}  // namespace
}  // namespace kiln::test
