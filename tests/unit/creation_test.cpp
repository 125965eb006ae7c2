// tests/unit/creation_test.cpp -- tensors made from nothing (empty, full, arange, linspace, eye,
// vectors, blobs) and the random generators.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <numeric>
#include <thread>

#include "runtime/ops/loops.h"
#include "runtime/simd/kernels.h"
#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

TEST(Creation, EmptyZerosOnesAndFullHaveTheRequestedTypeAndValue) {
  Tensor e = empty({2, 0, 3}, i32);
  EXPECT_EQ(e.type().str(), "i32[2,0,3]");
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(empty({}).dim(), 0);
  EXPECT_EQ(zeros({2, 3}, f64).to_vector<double>(), std::vector<double>(6, 0.0));
  EXPECT_EQ(ones({4}, u8).to_vector<uint8_t>(), std::vector<uint8_t>(4, 1));
  EXPECT_EQ(ones({2}, boolean).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(full({3}, 2.5, f16).to_vector<float>(), std::vector<float>(3, 2.5f));
  EXPECT_EQ(full({3}, 2.5, bf16).to_vector<float>(), std::vector<float>(3, 2.5f));
  EXPECT_EQ(full({2}, -7, i64).to_vector<int64_t>(), std::vector<int64_t>(2, -7));
  EXPECT_EQ(full({2}, 2.9, i32).to_vector<int32_t>(), std::vector<int32_t>(2, 2));
  EXPECT_EQ(full({1000}, -0.0).to_vector<float>()[999], 0.0f);
  EXPECT_TRUE(std::signbit(full({5}, -0.0).to_vector<float>()[4]));
  Tensor like = full_like(zeros({2, 2}, f64), 3);
  EXPECT_EQ(like.dtype(), f64);
  EXPECT_EQ(like.to_vector<double>(), std::vector<double>(4, 3.0));
  EXPECT_EQ(ones_like(zeros({3}, i32)).to_vector<int32_t>(), std::vector<int32_t>(3, 1));
}

// Large fills run on every thread, zeros past 16 MB with streaming stores: every element set,
// whatever the allocator handed out before (an odd length and an offset start included).
TEST(Creation, LargeFillsSetEveryElement) {
  const int64_t n = (int64_t{5} << 20) + 3;  // 20 MB of f32
  for (int rep = 0; rep < 2; ++rep) {
    { Tensor dirty = full({n}, 7.0f); }  // the next allocation of this size reuses the block
    Tensor z = zeros({n});
    EXPECT_EQ(max(abs(z)).item<float>(), 0.0f);
    Tensor f = full({n}, 1.5f);
    EXPECT_EQ(min(f).item<float>(), 1.5f);
    EXPECT_EQ(max(f).item<float>(), 1.5f);
  }
  Tensor big = full({n + 1}, 3.0f);
  zero_bytes(static_cast<char*>(big.data_ptr()) + 4, n * 4);  // starts off a 16-byte boundary
  std::vector<float> v = big.to_vector<float>();
  EXPECT_EQ(v.front(), 3.0f);
  EXPECT_EQ(*std::max_element(v.begin() + 1, v.end()), 0.0f);
}

TEST(Creation, ScalarTensorPicksTheDtypeFromTheKind) {
  EXPECT_EQ(scalar_tensor(1.5).type().str(), "f32[]");
  EXPECT_EQ(scalar_tensor(7).type().str(), "i64[]");
  EXPECT_EQ(scalar_tensor(true).type().str(), "bool[]");
  EXPECT_EQ(scalar_tensor(3, f64).item<double>(), 3.0);
  EXPECT_EQ(scalar_tensor(-4).item<int64_t>(), -4);
}

TEST(Creation, ArangeCountsInIntegersOrFloats) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), i64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(2, 11, 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  Tensor f = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(f.dtype(), f32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f}));
  Tensor g = arange(1.0, -1.0, -0.5, f64);
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{1, 0.5, 0, -0.5}));
  std::vector<double> want;
  for (int i = 0; i < 30; ++i) want.push_back(-1.0 + 0.1 * i);  // ceil(3 / 0.1) = 30 values
  expect_close(arange(-1.0, 2.0, 0.1, f64), want, 1e-12, 0);
  EXPECT_EQ(arange(0, 5, 2, f32).dtype(), f32);
  EXPECT_EQ(arange(int64_t{1} << 40, (int64_t{1} << 40) + 3).to_vector<int64_t>()[2], (int64_t{1} << 40) + 2);
}

TEST(Creation, ArangeRejectsAStepAwayFromStop) {
  expect_error([] { arange(0, 10, -1); }, {"arange", "step"});
  expect_error([] { arange(5, 1); }, {"arange"});
  expect_error([] { arange(0, 1, 0); }, {"arange"});
  expect_error([] { arange(0.0, std::nan(""), 1.0); }, {"arange"});
}

TEST(Creation, LinspaceHitsBothEndpointsExactly) {
  Tensor l = linspace(-1.0, 2.0, 7, f64);
  std::vector<double> v = l.to_vector<double>();
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v.front(), -1.0);
  EXPECT_EQ(v.back(), 2.0);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(v[i], -1.0 + 0.5 * i, 1e-15);
  std::vector<float> f = linspace(0.1, 0.7, 1001).to_vector<float>();
  EXPECT_EQ(f.back(), 0.7f);
  EXPECT_EQ(f.front(), 0.1f);
  for (int i = 0; i < 1001; ++i) ASSERT_NEAR(f[i], 0.1 + 0.6 * i / 1000.0, 1e-7);
  EXPECT_EQ(linspace(3.0, 5.0, 1).to_vector<float>(), (std::vector<float>{3.0f}));  // NumPy: start
  EXPECT_EQ(linspace(3.0, 5.0, 0).numel(), 0);
  EXPECT_EQ(linspace(5.0, 3.0, 3).to_vector<float>(), (std::vector<float>{5, 4, 3}));
  expect_error([] { linspace(0, 1, -1); }, {"linspace"});
}

TEST(Creation, EyeHasOnesOnTheDiagonal) {
  for (auto [n, m] : {std::pair<int64_t, int64_t>{3, -1}, {2, 4}, {4, 2}, {0, 0}}) {
    Tensor e = eye(n, m, i32);
    int64_t cols = m < 0 ? n : m;
    EXPECT_EQ(e.shape(), (Dims{n, cols}));
    std::vector<int32_t> v = e.to_vector<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(v[i * cols + j], i == j ? 1 : 0);
  }
  EXPECT_EQ(eye(2, -1, boolean).to_vector<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(eye(2, -1, f16).to_vector<float>(), (std::vector<float>{1, 0, 0, 1}));
}

TEST(Creation, FromVectorCopiesValuesIntoAShape) {
  std::vector<int32_t> src = {1, 2, 3, 4, 5, 6};
  Tensor t = from_vector(src, {2, 3});
  src[0] = 100;
  EXPECT_EQ(t.type().str(), "i32[2,3]");
  EXPECT_EQ(t[1][0].item<int32_t>(), 4);
  EXPECT_EQ(t[0][0].item<int32_t>(), 1);
  EXPECT_EQ(from_vector<bool>({true, false, true}).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(from_vector<Half>({Half(1.5f)}).dtype(), f16);
  EXPECT_EQ(tensor({1, 2}).dtype(), f32);
  expect_error([] { from_vector<float>({1, 2, 3}, {2, 2}); }, {"from_vector", "[2,2]", "3"});
}

TEST(Creation, FromBlobRunsTheDeleterWhenTheLastViewDies) {
  std::vector<float> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0f);
  int calls = 0;
  {
    Tensor t = from_blob(buf.data(), {3, 4}, f32, [&](void* p) {
      EXPECT_EQ(p, buf.data());
      ++calls;
    });
    Tensor v = t.slice(1, 1, 3).t();
    t = Tensor();
    EXPECT_EQ(calls, 0);
    buf[1 * 4 + 2] = -5;  // the tensor reads the caller's memory, not a copy
    EXPECT_EQ(v[1][1].item<float>(), -5.0f);
    Tensor copy = v.clone();
    v = Tensor();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(copy[1][1].item<float>(), -5.0f);
  }
  EXPECT_EQ(calls, 1);
}

TEST(Creation, FromBlobHonoursStrides) {
  std::vector<double> buf(20);
  std::iota(buf.begin(), buf.end(), 0.0);
  Tensor t = from_blob(buf.data(), {3, 2}, f64, {}, {5, 2});  // t[i][j] = buf[5i + 2j]
  EXPECT_EQ(t.strides(), (Dims{5, 2}));
  EXPECT_FALSE(t.is_contiguous());
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) want.push_back(5 * i + 2 * j);
  expect_close(t, want, 0, 0);
  expect_close(
      t + 1.0,
      [&] {
        for (double& w : want) w += 1;
        return want;
      }(),
      0, 0);
  expect_error([&] { from_blob(buf.data(), {3, 2}, f64, {}, {1}); }, {"from_blob", "strides"});
  expect_error([] { from_blob(nullptr, {2}, f32); }, {"from_blob", "null"});
}

// ---- random ------------------------------------------------------------------------------

// The vectorized Philox 4x32-10 (runtime/simd, every ISA the machine has) against Random123's
// known answer and a scalar reference, over blocks that start and end mid-vector.
TEST(Random, PhiloxMatchesItsKnownAnswerAndAScalarReference) {
  auto reference = [](uint64_t counter, uint64_t key) {
    uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = uint64_t{0xD2511F53u} * c0, p1 = uint64_t{0xCD9E8D57u} * c2;
      uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c0 = n0, c1 = static_cast<uint32_t>(p1), c2 = n2, c3 = static_cast<uint32_t>(p0);
      k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    return std::array<uint32_t, 4>{c0, c1, c2, c3};
  };
  std::array<uint32_t, 4> zero;
  simd::kernels().philox(0, 0, 1, zero.data());
  EXPECT_EQ(zero, (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(reference(0, 0), zero);
  for (uint64_t key : {uint64_t{1}, uint64_t{0x243f6a8885a308d3}}) {
    uint64_t first = 0xfffffffffffffff0ull - 7;  // wraps past 2^64 inside the block
    std::vector<uint32_t> words(4 * 37);
    simd::kernels().philox(key, first, 37, words.data());
    for (int i = 0; i < 37; ++i) {
      std::array<uint32_t, 4> want = reference(first + static_cast<uint64_t>(i), key);
      for (int w = 0; w < 4; ++w) EXPECT_EQ(words[37 * w + i], want[w]) << "counter " << i << " word " << w;
    }
  }
}

TEST(Random, ManualSeedMakesDrawsRepeatable) {
  manual_seed(42);
  Tensor a = rand({1000}), b = randn({1000}), c = randint(0, 100, {50});
  manual_seed(42);
  EXPECT_EQ(rand({1000}).to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(randn({1000}).to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(randint(0, 100, {50}).to_vector<int64_t>(), c.to_vector<int64_t>());
  EXPECT_NE(rand({1000}).to_vector<float>(), a.to_vector<float>());  // the stream moved on
  manual_seed(43);
  EXPECT_NE(rand({1000}).to_vector<float>(), a.to_vector<float>());
}

TEST(Random, DrawsDoNotDependOnTheThreadCount) {
  int saved = num_threads();
  set_num_threads(1);
  manual_seed(9);
  std::vector<float> one = randn({200000}).to_vector<float>();
  set_num_threads(4);
  manual_seed(9);
  std::vector<float> four = randn({200000}).to_vector<float>();
  set_num_threads(saved);
  EXPECT_EQ(one, four);
}

// manual_seed and draws from other threads: the generator's (seed, offset) changes as one. A
// reseed restarts the offset at 0 and only the drawing thread advances it, so each draw sees
// either the last offset plus the draw's size (no reseed between) or 0 (a reseed). With seed and
// offset stored apart, a draw could pair the new seed with the old offset.
TEST(Random, ManualSeedAndConcurrentDrawsSeeTheStateAsOne) {
  std::atomic<bool> stop{false};
  std::thread seeder([&] {
    for (uint64_t s = 1; !stop.load(); ++s) manual_seed(1000 + s % 7);
  });
  int64_t prev_seed = -1, prev_offset = -1, violations = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<int64_t> st = random_state(3).to_vector<int64_t>();
    if (i > 0 && st[1] != 0 && (st[0] != prev_seed || st[1] != prev_offset + 3)) ++violations;
    prev_seed = st[0];
    prev_offset = st[1];
  }
  stop = true;
  seeder.join();
  EXPECT_EQ(violations, 0);
  manual_seed(0);
}

TEST(Random, RandIsUniformOnTheHalfOpenUnitInterval) {
  manual_seed(123);
  const int n = 1 << 20;
  for (DType t : {f32, f64, f16, bf16}) {
    std::vector<double> v = rand({n}, t).to_vector<double>();
    double mean = 0;
    std::vector<int> bins(10, 0);
    for (double x : v) {
      ASSERT_GE(x, 0.0) << dtype_name(t);
      ASSERT_LT(x, 1.0) << dtype_name(t);
      mean += x / n;
      ++bins[std::min(9, static_cast<int>(x * 10))];
    }
    // Five standard errors, plus the spacing of the dtype's grid of values in [0.5, 1).
    double grid = t == bf16 ? 0x1p-8 : t == f16 ? 0x1p-11 : 0;
    EXPECT_NEAR(mean, 0.5, 5 * 0.2887 / std::sqrt(double(n)) + grid) << dtype_name(t);
    for (int b : bins) EXPECT_NEAR(b / double(n), 0.1, 5 * 0.3 / std::sqrt(double(n)) + grid) << dtype_name(t);
  }
}

TEST(Random, RandnHasTheMomentsOfAStandardNormal) {
  manual_seed(7);
  const int n = 1 << 20;
  std::vector<double> v = randn({n}).to_vector<double>();
  double m1 = 0, m2 = 0, m3 = 0, m4 = 0, within1 = 0;
  for (double x : v) {
    m1 += x;
    within1 += std::abs(x) < 1;
  }
  m1 /= n;
  for (double x : v) {
    double d = x - m1;
    m2 += d * d;
    m3 += d * d * d;
    m4 += d * d * d * d;
  }
  m2 /= n;
  m3 /= n;
  m4 /= n;
  // Five standard errors of each estimate: sd(mean) = 1/sqrt(n), sd(s) ~ 1/sqrt(2n),
  // sd(skew) ~ sqrt(6/n), sd(kurtosis) ~ sqrt(24/n), sd(P(|x|<1)) = sqrt(p(1-p)/n).
  EXPECT_NEAR(m1, 0.0, 5 / std::sqrt(double(n)));
  EXPECT_NEAR(std::sqrt(m2), 1.0, 5 / std::sqrt(2.0 * n));
  EXPECT_NEAR(m3 / std::pow(m2, 1.5), 0.0, 5 * std::sqrt(6.0 / n));
  EXPECT_NEAR(m4 / (m2 * m2), 3.0, 5 * std::sqrt(24.0 / n));
  EXPECT_NEAR(within1 / n, 0.682689, 5 * std::sqrt(0.2167 / n));
  for (double x : v) ASSERT_TRUE(std::isfinite(x));
}

TEST(Random, RandintStaysInRangeAndHitsEveryValue) {
  manual_seed(5);
  const int n = 700000;
  std::vector<int64_t> v = randint(-3, 4, {n}).to_vector<int64_t>();
  std::vector<int> count(7, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++count[x + 3];
  }
  for (int c : count) EXPECT_NEAR(c / double(n), 1.0 / 7, 5 * std::sqrt((1.0 / 7) * (6.0 / 7) / n));
  Tensor small = randint(10, 12, {3, 4}, i32);
  EXPECT_EQ(small.type().str(), "i32[3,4]");
  for (int32_t x : small.to_vector<int32_t>()) EXPECT_TRUE(x == 10 || x == 11);
  expect_error([] { randint(5, 5, {2}); }, {"randint"});
  // The whole i64 range: about half the draws are negative.
  std::vector<int64_t> wide = randint(INT64_MIN, INT64_MAX, {4000}).to_vector<int64_t>();
  double negative = std::count_if(wide.begin(), wide.end(), [](int64_t x) { return x < 0; });
  EXPECT_NEAR(negative / 4000, 0.5, 5 * std::sqrt(0.25 / 4000));
}

TEST(Random, BernoulliFiresWithProbabilityP) {
  manual_seed(17);
  const int n = 1 << 20;
  std::vector<float> v = bernoulli({n}, 0.3).to_vector<float>();
  double ones = 0;
  for (float x : v) {
    ASSERT_TRUE(x == 0.0f || x == 1.0f);
    ones += x;
  }
  EXPECT_NEAR(ones / n, 0.3, 5 * std::sqrt(0.21 / n));
  Tensor p = from_vector<double>({0.0, 1.0, 0.0, 1.0});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(bernoulli(p).to_vector<double>(), (std::vector<double>{0, 1, 0, 1}));
  Tensor half = full({n}, 0.5, f32);
  EXPECT_NEAR(bernoulli(half).sum().item<double>() / n, 0.5, 5 * std::sqrt(0.25 / n));
  expect_error([] { bernoulli({2}, 1.5); }, {"bernoulli"});
  expect_error([] { bernoulli(zeros({2}, i32)); }, {"bernoulli", "i32[2]"});
}

TEST(Random, RandpermIsAPermutation) {
  manual_seed(3);
  for (int64_t n : {0, 1, 2, 1000}) {
    std::vector<int64_t> v = randperm(n).to_vector<int64_t>();
    std::vector<int64_t> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> want(static_cast<size_t>(n));
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want);
    if (n == 1000) {
      EXPECT_NE(v, want);
    }
  }
  // Every position is equally likely to hold 0: over many draws of 4, each about 1/4.
  std::vector<int> where(4, 0);
  for (int i = 0; i < 8000; ++i) {
    std::vector<int64_t> v = randperm(4).to_vector<int64_t>();
    ++where[std::find(v.begin(), v.end(), 0) - v.begin()];
  }
  for (int w : where) EXPECT_NEAR(w / 8000.0, 0.25, 5 * std::sqrt(0.1875 / 8000));
  expect_error([] { randperm(-1); }, {"randperm"});
}
