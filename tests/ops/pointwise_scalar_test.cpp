// tests/ops/pointwise_scalar_test.cpp -- numbers as operands (kept as immediates, never boxed)
// on either side, and the dtypes they promote to.
#include "tests/ops/pointwise_cases.h"

namespace kiln::test {
namespace {

const Dims kScalarShape = {5, 41};

struct ScalarCase {
  const char* name;  // the binary case whose reference it uses
  Tensor (*tensor_scalar)(const Tensor&, Scalar);
  Tensor (*scalar_tensor)(Scalar, const Tensor&);  // null: no such overload
};

const ScalarCase kScalarCases[] = {
    {"add", [](const Tensor& a, Scalar b) { return a + b; }, [](Scalar a, const Tensor& b) { return a + b; }},
    {"sub", [](const Tensor& a, Scalar b) { return a - b; }, [](Scalar a, const Tensor& b) { return a - b; }},
    {"mul", [](const Tensor& a, Scalar b) { return a * b; }, [](Scalar a, const Tensor& b) { return a * b; }},
    {"div", [](const Tensor& a, Scalar b) { return a / b; }, [](Scalar a, const Tensor& b) { return a / b; }},
    {"pow", [](const Tensor& a, Scalar b) { return pow(a, b); }, [](Scalar a, const Tensor& b) { return pow(a, b); }},
    {"maximum", [](const Tensor& a, Scalar b) { return maximum(a, b); }, nullptr},
    {"minimum", [](const Tensor& a, Scalar b) { return minimum(a, b); }, nullptr},
    {"eq", [](const Tensor& a, Scalar b) { return a == b; }, [](Scalar a, const Tensor& b) { return a == b; }},
    {"ne", [](const Tensor& a, Scalar b) { return a != b; }, [](Scalar a, const Tensor& b) { return a != b; }},
    {"lt", [](const Tensor& a, Scalar b) { return a < b; }, [](Scalar a, const Tensor& b) { return a < b; }},
    {"le", [](const Tensor& a, Scalar b) { return a <= b; }, [](Scalar a, const Tensor& b) { return a <= b; }},
    {"gt", [](const Tensor& a, Scalar b) { return a > b; }, [](Scalar a, const Tensor& b) { return a > b; }},
    {"ge", [](const Tensor& a, Scalar b) { return a >= b; }, [](Scalar a, const Tensor& b) { return a >= b; }},
    {"logical_and", [](const Tensor& a, Scalar b) { return logical_and(a, b); },
     [](Scalar a, const Tensor& b) { return logical_and(a, b); }},
    {"logical_or", [](const Tensor& a, Scalar b) { return logical_or(a, b); },
     [](Scalar a, const Tensor& b) { return logical_or(a, b); }},
};

const BinaryCase& binary_case(const std::string& name) {
  for (const BinaryCase& c : binary_cases())
    if (name == c.name) return c;
  throw std::logic_error("no binary case " + name);
}

// PyTorch's rule for a tensor of dtype t with a Python number: the number never widens the
// tensor's dtype within its kind, but a float number makes an integer or bool tensor f32 and
// an integer number makes a bool tensor i64.
DType with_scalar(DType t, Scalar s) {
  if (s.is_float() && !is_float(t)) return f32;
  if (s.kind() == Scalar::Kind::Int && t == boolean) return i64;
  return t;
}

// Whether an integer number has a value in integer dtype t (a float number always converts).
bool fits(Scalar s, DType t) {
  if (s.kind() != Scalar::Kind::Int) return true;
  int64_t v = s.to_int();
  switch (t) {
    case DType::U8: return v >= 0 && v <= 255;
    case DType::I32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return true;
  }
}

void PrintTo(const ScalarCase& c, std::ostream* os) { *os << c.name; }

class ScalarOperand : public ::testing::TestWithParam<ScalarCase> {};

TEST_P(ScalarOperand, OnEitherSideMatchesReferenceAndPromotes) {
  const ScalarCase& sc = GetParam();
  const BinaryCase& c = binary_case(sc.name);
  manual_seed(31);
  const Scalar scalars[] = {Scalar(0.5), Scalar(2.5), Scalar(-1.5), Scalar(2), Scalar(-3), Scalar(true), Scalar(0)};
  for (DType t : kAllDTypes) {
    Tensor x = values(kScalarShape, t, std::max(c.lo, c.lo_b), std::min(c.hi, c.hi_b), c.whole);
    std::vector<double> xv = x.to_vector<double>();
    for (Scalar s : scalars) {
      if (c.id == OpId::Pow && s.to_double() <= 0) continue;  // pow's base stays positive below
      SCOPED_TRACE(dname(t) + " with " + std::to_string(s.to_double()));
      DType ct = compute_dtype(c.id, with_scalar(t, s));
      std::vector<double> sv(xv.size(), s.to_double());
      if (!(op_def(c.id).kinds & kind_bit(ct))) {
        EXPECT_TRUE(throws_error([&] { sc.tensor_scalar(x, s); }, {op_name(c.id), dname(ct)}));
        continue;
      }
      if (!fits(s, ct)) {  // -3 has no u8 value: an error, as in PyTorch, not a wrapped 253
        EXPECT_TRUE(throws_error([&] { sc.tensor_scalar(x, s); }, {op_name(c.id), dname(ct), "-3"}));
        continue;
      }
      DType out = result_dtype(c.id, ct);
      Tensor y = sc.tensor_scalar(x, s);
      EXPECT_EQ(y.dtype(), out);
      EXPECT_TRUE(all_close(y, binary_ref(c, xv, sv, out), kScalarShape));
      if (!sc.scalar_tensor) continue;
      Tensor z = sc.scalar_tensor(s, x);
      EXPECT_EQ(z.dtype(), out);
      EXPECT_TRUE(all_close(z, binary_ref(c, sv, xv, out), kScalarShape));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, ScalarOperand, ::testing::ValuesIn(kScalarCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ScalarPromotion, FollowsPyTorchForPythonNumbers) {
  manual_seed(32);
  Tensor xi = uniform({4}, i32, -5, 5), xh = uniform({4}, f16, -5, 5), xb = uniform({4}, boolean, 0, 1),
         xu = uniform({4}, u8, 0, 9), xd = uniform({4}, f64, -5, 5);
  EXPECT_EQ((xi * 2.5).dtype(), f32);  // a float number makes integers f32
  EXPECT_EQ((xi * 2).dtype(), i32);    // an integer number keeps i32 (not i64)
  EXPECT_EQ((xh * 2.0).dtype(), f16);  // a float number keeps f16 (not f32, not f64)
  EXPECT_EQ((xd * 2.0f).dtype(), f64);
  EXPECT_EQ((xu + 200).dtype(), u8);
  EXPECT_TRUE(throws_error([&] { return xu + 300; }, {"add", "300", "u8"}));  // no u8 value
  EXPECT_TRUE(throws_error([&] { return xi * (int64_t{1} << 40); }, {"mul", "i32"}));
  EXPECT_EQ((xb + true).dtype(), boolean);
  EXPECT_EQ((xb * 2).dtype(), i64);
  EXPECT_EQ((xb * 2.5).dtype(), f32);
  EXPECT_EQ((xi / 2).dtype(), f32);  // true division
  EXPECT_EQ((xi < 2.5).dtype(), boolean);
  std::vector<double> vi = xi.to_vector<double>();
  EXPECT_TRUE(all_close(xi * 2.5, map(vi, [](double a) { return a * 2.5; }), {4}));
  EXPECT_TRUE(all_close(xi < 2.5,
                        map(
                            vi, [](double a) { return double(a < 2.5); }),
                        {4}));
  EXPECT_TRUE(all_close(xi / 2, map(vi, [](double a) { return a / 2; }), {4}));
  EXPECT_TRUE(all_close(xu + 200, map(xu.to_vector<double>(), [](double a) { return stored_as(u8, a + 200); }), {4}));
}

TEST(ScalarOperand, ExpressionsMixTensorsAndNumbers) {
  manual_seed(33);
  Tensor x = uniform({3, 7}, f32, -4, 4), y = uniform({7}, f32, 0.5, 3);
  std::vector<double> xv = x.to_vector<double>(), yv = broadcast_values(y.to_vector<double>(), {7}, {3, 7});
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = (2 - xv[i]) * 0.5 + (-xv[i]) / yv[i];
  EXPECT_TRUE(all_close((2 - x) * 0.5 + (-x) / y, want, {3, 7}));
}

TEST(WhereScalars, EitherOrBothValuesMayBeNumbers) {
  manual_seed(34);
  Tensor c = uniform({4, 6}, boolean, 0, 1);
  Tensor x = uniform({4, 6}, f32, -5, 5), xi = uniform({6}, i32, -5, 5);
  std::vector<double> cv = c.to_vector<double>(), xv = x.to_vector<double>();
  std::vector<double> xiv = broadcast_values(xi.to_vector<double>(), {6}, {4, 6});
  auto pick = [&](auto a, auto b) {
    std::vector<double> out(cv.size());
    for (size_t i = 0; i < cv.size(); ++i) out[i] = cv[i] != 0 ? a(i) : b(i);
    return out;
  };
  auto num = [](double v) { return [v](size_t) { return v; }; };
  auto vec = [](const std::vector<double>& v) { return [&v](size_t i) { return v[i]; }; };
  Tensor y = where(c, x, 0.0);
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_TRUE(all_close(y, pick(vec(xv), num(0.0)), {4, 6}));
  y = where(c, 1.5, x);
  EXPECT_TRUE(all_close(y, pick(num(1.5), vec(xv)), {4, 6}));
  y = where(c, xi, 0.5);  // an i32 tensor with a float number computes in f32
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_TRUE(all_close(y, pick(vec(xiv), num(0.5)), {4, 6}));
  y = where(c, xi, 7);
  EXPECT_EQ(y.dtype(), i32);
  EXPECT_TRUE(all_close(y, pick(vec(xiv), num(7)), {4, 6}));
  y = where(c, 1, 2);  // numbers only: integers give i64
  EXPECT_EQ(y.dtype(), i64);
  EXPECT_TRUE(all_close(y, pick(num(1), num(2)), {4, 6}));
  y = where(c, 1.5, -2);
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_TRUE(all_close(y, pick(num(1.5), num(-2)), {4, 6}));
}

}  // namespace
}  // namespace kiln::test
