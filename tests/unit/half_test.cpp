// tests/unit/half_test.cpp -- f16 and bf16: decoding, round-to-nearest-even encoding
// (subnormals, overflow, NaN), and tensor casts to, from and between them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;

namespace {

// The value nearest to `x` among floats with `bits` significant bits and exponents >= min_exp
// (below it: the subnormal spacing), ties to even; +-inf past `max_finite`. Double arithmetic.
double round_to_format(double x, int bits, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  double a = std::abs(x);
  int e = std::max(std::ilogb(a), min_exp);
  double ulp = std::ldexp(1.0, e - (bits - 1));
  double r = std::nearbyint(a / ulp) * ulp;  // default rounding mode: half to even
  if (r > max_finite) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}
double round_to_half(double x) { return round_to_format(x, 11, -14, 65504.0); }
double round_to_bf16(double x) {
  return round_to_format(x, 8, -126, std::ldexp(255.0, 120));  // (2 - 2^-7) * 2^127
}

// The value of f16 bits, decoded from the IEEE layout.
double decode_half(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0    ? std::ldexp(m, -24)
             : e == 31 ? (m ? std::nan("") : std::numeric_limits<double>::infinity())
                       : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

}  // namespace

TEST(Half, DecodesEveryBitPatternAndRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    auto h = static_cast<uint16_t>(b);
    double want = decode_half(h);
    float got = Half::to_float(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
      ASSERT_TRUE(std::isnan(static_cast<float>(Half(got))));
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << b;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << b;
    ASSERT_EQ(Half::from_float(got), h) << b;
  }
}

TEST(Half, RoundsToNearestEvenIncludingSubnormalsAndOverflow) {
  const double tiny = std::ldexp(1.0, -24);  // smallest f16 subnormal
  std::vector<float> cases = {65504.0f,
                              65519.0f,
                              65520.0f,
                              65536.0f,
                              1e6f,
                              -65520.0f,
                              float(tiny),
                              float(tiny / 2),
                              float(tiny * 1.5),
                              float(tiny * 0.75),
                              float(tiny * 2.5),
                              float(std::ldexp(1.0, -14)),
                              float(std::ldexp(1023.0, -24)),
                              float(1 + std::ldexp(1.0, -11)),
                              float(1 + 3 * std::ldexp(1.0, -11)),
                              float(1 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20)),
                              -0.0f,
                              1e-10f};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    float f;
    uint32_t u = bits(rng);
    u = (u & 0x80000000u) | ((0x30000000u + (u & 0x7fffffffu) % 0x18000000u));  // |f| in ~[2^-31, 2^17)
    std::memcpy(&f, &u, 4);
    cases.push_back(f);
  }
  for (float f : cases) {
    double want = round_to_half(f);
    float got = Half(f);
    ASSERT_EQ(static_cast<double>(got), want) << "f = " << f;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << "f = " << f;
  }
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);  // the tie goes to the even neighbour: inf
  EXPECT_EQ(Half(float(tiny)).bits, 0x0001);
  EXPECT_EQ(Half(float(tiny / 2)).bits, 0x0000);  // a tie with zero rounds to zero
  EXPECT_EQ(Half(float(tiny * 1.5)).bits, 0x0002);
  EXPECT_EQ(Half(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::nanf("")))));
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
}

TEST(BFloat16, RoundsToNearestEvenAndKeepsNanAndInf) {
  std::vector<float> cases = {1.0f,
                              1.0f + 0x1p-8f,
                              1.0f + 3 * 0x1p-8f,
                              1.0f + 0x1p-8f + 0x1p-20f,
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(),
                              1e-40f,
                              -3.0e38f,
                              3.3895e38f,
                              -0.0f};
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    uint32_t u = bits(rng);
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf and NaN are checked below
    float f;
    std::memcpy(&f, &u, 4);
    cases.push_back(f);
  }
  for (float f : cases) {
    double want = round_to_bf16(f);
    float got = BFloat16(f);
    ASSERT_EQ(static_cast<double>(got), want) << "f = " << f;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << "f = " << f;
  }
  EXPECT_EQ(BFloat16(1.0f + 0x1p-8f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  uint32_t sig_nan = 0x7f800001u;  // a NaN whose payload sits below bf16's bits
  float snan;
  std::memcpy(&snan, &sig_nan, 4);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(snan))));
}

TEST(Half, TensorCastsRoundLikeTheScalarConversions) {
  manual_seed(5);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xv = (randn({1000}) * 1000.0f).to_vector<float>();
  for (float f : {65504.0f, 65519.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x3p-25f, 0x1p-14f, 1e-8f, 3.4e38f, -0.0f, inf,
                  -inf, std::nanf("")})
    xv.push_back(f);
  Tensor x = from_vector(xv);
  std::vector<double> want_h, want_b, want_hb;
  for (float f : xv) {
    want_h.push_back(round_to_half(f));
    want_b.push_back(round_to_bf16(f));
    want_hb.push_back(round_to_bf16(round_to_half(f)));
  }
  expect_close(x.to(f16), want_h, 0, 0);
  expect_close(x.to(bf16), want_b, 0, 0);
  expect_close(x.to(f64).to(f16).to(f32), want_h, 0, 0);
  expect_close(x.to(f16).to(bf16), want_hb, 0, 0);
}

TEST(Half, TensorCastsToIntegersSaturateLikeF32) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  Tensor x = from_vector<float>({2.75f, -2.75f, 60000.0f, -60000.0f, inf, -inf, nan, 300.0f, -1.0f});
  for (DType half : {f16, bf16}) {
    Tensor h = x.to(half);
    for (DType t : {i32, i64, u8}) {
      std::vector<double> want;
      for (float f : h.to_vector<float>()) {  // the f16/bf16 values, cast as an f32 would be
        double lo = t == u8 ? 0 : t == i32 ? INT32_MIN : double(INT64_MIN);
        double hi = t == u8 ? 255 : t == i32 ? INT32_MAX : double(INT64_MAX);
        want.push_back(std::isnan(f) ? 0 : std::clamp(std::trunc(double(f)), lo, hi));
      }
      expect_close(h.to(t), want, 0, 0);
    }
  }
}
