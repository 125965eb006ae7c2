// tests/ops/rearrange_test.cpp -- tril, triu, masked_fill, flip, roll, repeat, split and chunk
// against references written here in double on random inputs (contiguous and transposed
// views), their gradients by finite differences, their traced form against eager, and their
// errors.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::all_indices;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::flat_index;

namespace {

// out[idx] = x[source(idx)] (or 0 where source gives an empty index), over out's shape.
std::vector<double> gathered(const Tensor& x, const Dims& out_shape,
                             const std::function<std::vector<int64_t>(std::vector<int64_t>)>& source) {
  std::vector<double> v = x.contiguous().to_vector<double>(), out;
  for (const std::vector<int64_t>& idx : all_indices(out_shape)) {
    std::vector<int64_t> s = source(idx);
    out.push_back(s.empty() ? 0.0 : v[static_cast<size_t>(flat_index(s, x.shape()))]);
  }
  return out;
}

// A random [2, 3, 4] f64 tensor and the same values as a transposed (non-contiguous) view.
std::vector<Tensor> inputs() {
  Tensor x = randn({2, 3, 4}, f64);
  Tensor t = randn({2, 4, 3}, f64).transpose(1, 2);
  EXPECT_FALSE(t.is_contiguous());
  return {x, t};
}

void expect_gradient(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  Tensor p = x.detach().clone().requires_grad_();
  EXPECT_EQ(autograd::gradcheck([&](std::span<const Tensor> in) { return f(in[0]); }, std::vector<Tensor>{p}), "");
}

void expect_traced_matches(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  jit::Function g = jit::trace([&](Tensor a) { return f(a); }, {x});
  Tensor want = f(x), got = g(x);
  ASSERT_EQ(got.shape(), want.shape());
  expect_close(got, want.to_vector<double>(), 1e-12, 1e-12);
}

}  // namespace

TEST(Tril, KeepsTheLowerTriangleOfTheLastTwoDims) {
  for (const Tensor& x : inputs())
    for (int64_t k : {-3, -1, 0, 1, 2, 5}) {
      SCOPED_TRACE(k);
      auto src = [&](bool lower) {
        return [&, lower](std::vector<int64_t> i) {
          int64_t off = i[2] - i[1];
          return (lower ? off <= k : off >= k) ? i : std::vector<int64_t>{};
        };
      };
      expect_close(tril(x, k), gathered(x, x.shape(), src(true)), 0, 0);
      expect_close(triu(x, k), gathered(x, x.shape(), src(false)), 0, 0);
    }
}

TEST(Tril, KeepsTheDtypeAndDifferentiates) {
  Tensor b = randint(0, 2, {4, 4}).to(DType::Bool);
  EXPECT_EQ(tril(b).dtype(), DType::Bool);
  EXPECT_EQ(triu(randint(0, 9, {3, 5}), 1).dtype(), DType::I64);
  expect_close(tril(ones({2, 3}, f32)), {1, 0, 0, 1, 1, 0}, 0, 0);
  expect_gradient([](const Tensor& x) { return tril(x, -1); }, randn({3, 4}, f64));
  expect_gradient([](const Tensor& x) { return triu(x, 1); }, randn({2, 3, 3}, f64));
  expect_traced_matches([](const Tensor& x) { return tril(x) * 2 + triu(x, 1); }, randn({4, 4}, f64));
  expect_error([] { tril(randn({5})); }, {"tril", "2 or more dims", "f32[5]"});
}

TEST(MaskedFill, PutsTheValueWhereTheMaskIsTrue) {
  for (const Tensor& x : inputs()) {
    Tensor mask = randint(0, 2, {3, 1}).to(DType::Bool);  // broadcasts over [2, 3, 4]
    std::vector<double> m = mask.to_vector<double>(), v = x.contiguous().to_vector<double>(), want;
    for (const auto& i : all_indices(x.shape()))
      want.push_back(m[static_cast<size_t>(i[1])] != 0 ? -7.5 : v[static_cast<size_t>(flat_index(i, x.shape()))]);
    expect_close(masked_fill(x, mask, -7.5), want, 0, 0);
    expect_close(masked_fill(x, mask, scalar_tensor(-7.5, f64)), want, 0, 0);
  }
  // The tensor's dtype wins: 2.7 in an i64 tensor is 2, as torch.
  Tensor i = zeros({3}, DType::I64);
  Tensor r = masked_fill(i, from_vector(std::vector<int64_t>{1, 0, 1}).to(DType::Bool), 2.7);
  EXPECT_EQ(r.dtype(), DType::I64);
  expect_close(r, {2, 0, 2}, 0, 0);
}

TEST(MaskedFill, DifferentiatesInTheTensorAndTheValue) {
  Tensor mask = randint(0, 2, {3, 4}).to(DType::Bool);
  expect_gradient([&](const Tensor& x) { return masked_fill(x, mask, 3.0); }, randn({3, 4}, f64));
  Tensor x = randn({3, 4}, f64);
  expect_gradient([&](const Tensor& v) { return masked_fill(x, mask, v); }, randn({}, f64));
  expect_traced_matches([&](const Tensor& x) { return exp(masked_fill(x, mask, -1e9)); }, randn({3, 4}, f64));
}

TEST(MaskedFill, RefusesAMaskThatIsNotBoolOrDoesNotBroadcastToTheTensor) {
  expect_error([] { masked_fill(randn({3}), zeros({3}), 1.0); }, {"masked_fill", "bool", "f32[3]"});
  expect_error(
      [] {
        masked_fill(randn({3}), zeros({2, 3}, DType::Bool), 1.0);
      },
      {"masked_fill", "bool[2,3]", "f32[3]"});
  expect_error([] { masked_fill(randn({3}), zeros({3}, DType::Bool), zeros({1})); }, {"masked_fill", "0-d"});
}

TEST(Flip, ReversesEachGivenDim) {
  for (const Tensor& x : inputs()) {
    expect_close(flip(x, {0, 2}),
                 gathered(x, x.shape(),
                          [](std::vector<int64_t> i) {
                            return std::vector<int64_t>{1 - i[0], i[1], 3 - i[2]};
                          }),
                 0, 0);
    expect_close(flip(x, {-2}),
                 gathered(x, x.shape(),
                          [](std::vector<int64_t> i) {
                            return std::vector<int64_t>{i[0], 2 - i[1], i[2]};
                          }),
                 0, 0);
  }
  Tensor x = randn({3});
  Tensor same = flip(x, {});
  expect_close(same, x.to_vector<double>(), 0, 0);
  EXPECT_NE(same.data_ptr(), x.data_ptr());  // a copy, as torch
  expect_gradient([](const Tensor& t) { return flip(t, {1}) * flip(t, {0, 1}); }, randn({3, 4}, f64));
  expect_traced_matches([](const Tensor& t) { return flip(t, {0}) + 1; }, randn({5, 2}, f64));
  expect_error([] { flip(randn({2, 3}), {1, -1}); }, {"flip", "twice"});
  expect_error([] { flip(randn({2, 3}), {2}); }, {"flip"});
}

TEST(Roll, ShiftsWithWrapAround) {
  for (const Tensor& x : inputs())
    for (std::pair<int64_t, int64_t> shift : {std::pair<int64_t, int64_t>{1, -1}, {4, 9}, {-5, 0}, {0, 0}}) {
      int64_t s1 = shift.first, s2 = shift.second;  // (clang 14 cannot capture structured bindings)
      SCOPED_TRACE(testing::Message() << s1 << ", " << s2);
      auto mod = [](int64_t a, int64_t n) { return ((a % n) + n) % n; };
      expect_close(roll(x, {s1, s2}, {1, -1}),
                   gathered(x, x.shape(),
                            [&](std::vector<int64_t> i) {
                              return std::vector<int64_t>{i[0], mod(i[1] - s1, 3), mod(i[2] - s2, 4)};
                            }),
                   0, 0);
    }
  // Without dims: over the flattened tensor, then the shape back.
  Tensor x = arange(0, 6, 1, f64).reshape({2, 3});
  expect_close(roll(x, {2}), {4, 5, 0, 1, 2, 3}, 0, 0);
  EXPECT_EQ(roll(x, {2}).shape(), (Dims{2, 3}));
  expect_gradient([](const Tensor& t) { return roll(t, {1, -2}, {0, 1}) * t; }, randn({3, 4}, f64));
  expect_traced_matches([](const Tensor& t) { return sin(roll(t, {3}, {1})); }, randn({2, 5}, f64));
  expect_error([] { roll(randn({2, 3}), {1, 2}); }, {"roll", "one shift"});
  expect_error([] { roll(randn({2, 3}), {1, 2}, {0}); }, {"roll", "2 shifts for 1 dims"});
}

TEST(Repeat, TilesEachDimAndAddsLeadingOnes) {
  for (const Tensor& x : inputs()) {
    Tensor r = repeat(x, {2, 1, 3, 2});
    ASSERT_EQ(r.shape(), (Dims{2, 2, 9, 8}));
    expect_close(r,
                 gathered(x, r.shape(),
                          [](std::vector<int64_t> i) {
                            return std::vector<int64_t>{i[1] % 2, i[2] % 3, i[3] % 4};
                          }),
                 0, 0);
  }
  EXPECT_EQ(repeat(randn({2, 3}), {0, 2}).shape(), (Dims{0, 6}));
  expect_gradient([](const Tensor& t) { return repeat(t, {2, 3}); }, randn({2, 2}, f64));
  expect_traced_matches([](const Tensor& t) { return repeat(t, {3, 1}) * 2; }, randn({2, 3}, f64));
  expect_error([] { repeat(randn({2, 3}), {2}); }, {"repeat", "at least one per dim", "f32[2,3]"});
  expect_error([] { repeat(randn({2}), {-1}); }, {"repeat", "negative"});
}

TEST(Split, GivesViewsOfTheGivenSizes) {
  Tensor x = randn({7, 3}, f64);
  std::vector<Tensor> parts = split(x, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Dims{3, 3}));
  EXPECT_EQ(parts[2].shape(), (Dims{1, 3}));
  EXPECT_EQ(parts[1].data_ptr(), x.narrow(0, 3, 3).data_ptr());  // views, as torch
  expect_close(cat(parts, 0), x.to_vector<double>(), 0, 0);
  std::vector<Tensor> cols = split(x, std::vector<int64_t>{1, 0, 2}, -1);
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(cols[1].shape(), (Dims{7, 0}));
  expect_close(cols[2], x.slice(1, 1, 3).contiguous().to_vector<double>(), 0, 0);
  expect_gradient(
      [](const Tensor& t) {
        auto p = split(t, 2, 1);
        return p[0] * p[1];
      },
      randn({3, 4}, f64));
  expect_error([&] { split(x, std::vector<int64_t>{3, 3}); }, {"split", "sum to 6", "f64[7,3]", "7"});
  expect_error([&] { split(x, 0); }, {"split", "positive"});
}

TEST(Chunk, GivesPiecesOfTheCeilingSize) {
  Tensor x = randn({2, 10});
  std::vector<Tensor> c = chunk(x, 3, 1);  // 4, 4, 2
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2].shape(), (Dims{2, 2}));
  EXPECT_EQ(chunk(randn({5}), 4).size(), 3u);  // torch: pieces of 2, so 2, 2, 1
  EXPECT_EQ(chunk(randn({2}), 5).size(), 2u);
  std::vector<Tensor> e = chunk(zeros({0}), 3);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].numel(), 0);
  expect_traced_matches(
      [](const Tensor& t) {
        auto p = chunk(t, 2, 0);
        return p[0] - p[1];
      },
      randn({4, 3}, f64));
  expect_error([] { chunk(randn({4}), 0); }, {"chunk", "positive"});
}
