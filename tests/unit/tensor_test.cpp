// tests/unit/tensor_test.cpp -- the Tensor handle: views and their geometry, copies, casts,
// element access and error messages (f16/bf16 conversions: half_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

const void* storage_of(const Tensor& t) { return t.impl()->storage.get(); }

// Reads element `idx` of `t` through its strides and offset (not through kiln's copy).
float at(const Tensor& t, std::initializer_list<int64_t> idx) {
  const float* base = static_cast<const float*>(t.impl()->storage->data()) + t.offset();
  int64_t off = 0, d = 0;
  for (int64_t i : idx) off += i * t.strides()[d++];
  return base[off];
}

Tensor arange_f32(const Dims& shape) { return arange(0, shape.product()).to(f32).reshape(shape); }

}  // namespace

TEST(Tensor, WritesThroughAViewAreSeenByTheBase) {
  Tensor base = zeros({3, 4});
  Tensor v = base.slice(1, 1, 4, 2).select(0, 2);  // base[2, 1::2]
  EXPECT_EQ(storage_of(v), storage_of(base));
  float* p = v.data<float>();
  p[0] = 7;
  p[v.stride(0)] = 9;
  std::vector<double> want(12, 0.0);
  want[2 * 4 + 1] = 7;
  want[2 * 4 + 3] = 9;
  expect_close(base, want, 0, 0);
  Tensor w = base.t().reshape({12});  // not viewable: a copy, unaffected by later writes
  base.data<float>()[0] = 5;
  EXPECT_EQ(w.to_vector<float>()[0], 0.0f);
  EXPECT_EQ(base.t().contiguous().to_vector<float>()[0], 5.0f);
}

TEST(Tensor, PermuteAndTransposeReorderStrides) {
  Tensor x = arange_f32({2, 3, 4});
  EXPECT_EQ(x.strides(), (Dims{12, 4, 1}));
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Dims{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Dims{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(at(p, {3, 1, 2}), 1 * 12 + 2 * 4 + 3);
  Tensor t = x.transpose(-1, 0);
  EXPECT_EQ(t.shape(), (Dims{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Dims{1, 4, 12}));
  EXPECT_EQ(x.permute({-1, -3, -2}).strides(), p.strides());
  Tensor m = arange_f32({3, 5});
  EXPECT_EQ(m.t().shape(), (Dims{5, 3}));
  EXPECT_EQ(m.t().strides(), (Dims{1, 5}));
}

TEST(Tensor, SliceWithStepScalesTheStrideAndMovesTheOffset) {
  Tensor x = arange_f32({10, 6});
  Tensor s = x.slice(0, 1, 8, 3);  // rows 1, 4, 7
  EXPECT_EQ(s.shape(), (Dims{3, 6}));
  EXPECT_EQ(s.strides(), (Dims{18, 1}));
  EXPECT_EQ(s.offset(), 6);
  EXPECT_EQ(at(s, {2, 5}), 7 * 6 + 5);
  Tensor c = x.slice(-1, -4, 100, 2);  // Python slicing: cols 2, 4; the stop clamps
  EXPECT_EQ(c.shape(), (Dims{10, 2}));
  EXPECT_EQ(c.offset(), 2);
  EXPECT_EQ(c.strides(), (Dims{6, 2}));
  EXPECT_EQ(x.slice(0, 5, 2).shape(), (Dims{0, 6}));
  Tensor one = x.slice(0, 2, 10, INT64_MAX);  // Python's x[2::sys.maxsize]: one row
  EXPECT_EQ(one.shape(), (Dims{1, 6}));
  EXPECT_EQ(one[0][1].item<float>(), 13.0f);
  expect_error([&] { x.slice(0, 0, 5, 0); }, {"slice", "step"});
}

TEST(Tensor, NarrowAndSelectViewOneRange) {
  Tensor x = arange_f32({4, 5});
  Tensor n = x.narrow(1, 1, 3);
  EXPECT_EQ(n.shape(), (Dims{4, 3}));
  EXPECT_EQ(n.offset(), 1);
  EXPECT_EQ(n.strides(), (Dims{5, 1}));
  Tensor s = x.select(1, -2);  // column 3
  EXPECT_EQ(s.shape(), (Dims{4}));
  EXPECT_EQ(s.strides(), (Dims{5}));
  EXPECT_EQ(s.offset(), 3);
  expect_close(s, {3, 8, 13, 18}, 0, 0);
  EXPECT_EQ(x[2].offset(), 10);
  EXPECT_EQ(x[-1][-1].item<float>(), 19.0f);
  expect_error([&] { x.narrow(0, 2, 3); }, {"narrow", "f32[4,5]"});
  expect_error([&] { x.narrow(0, 1, INT64_MAX); }, {"narrow", "f32[4,5]"});
  expect_close(x.narrow(1, -2, 2).select(0, 0), {3, 4}, 0, 0);
}

TEST(Tensor, ExpandGivesZeroStridesAndSharesMemory) {
  Tensor x = arange_f32({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Dims{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Dims{0, 1, 0}));
  EXPECT_EQ(storage_of(e), storage_of(x));
  EXPECT_EQ(x.expand({-1, 5}).shape(), (Dims{3, 5}));
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) want.push_back(i);
  expect_close(e, want, 0, 0);
  expect_error([&] { x.expand({3, 2, 2}); }, {"expand", "f32[3,1]", "[3,2,2]"});
  expect_error([&] { x.expand({4}); }, {"expand", "f32[3,1]"});
}

TEST(Tensor, SqueezeUnsqueezeAndFlattenAreViews) {
  Tensor x = arange_f32({2, 1, 3, 1});
  EXPECT_EQ(x.squeeze().shape(), (Dims{2, 3}));
  EXPECT_EQ(x.squeeze(1).shape(), (Dims{2, 3, 1}));
  EXPECT_EQ(x.squeeze(-1).shape(), (Dims{2, 1, 3}));
  EXPECT_EQ(x.squeeze(0).shape(), x.shape());  // not size 1: unchanged
  EXPECT_EQ(x.unsqueeze(0).shape(), (Dims{1, 2, 1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Dims{2, 1, 3, 1, 1}));
  EXPECT_EQ(x.flatten().shape(), (Dims{6}));
  EXPECT_EQ(x.flatten(1, 2).shape(), (Dims{2, 3, 1}));
  EXPECT_EQ(x.flatten(-2).shape(), (Dims{2, 1, 3}));
  EXPECT_EQ(scalar_tensor(1.5).flatten().shape(), (Dims{1}));
  for (const Tensor& v : {x.squeeze(), x.unsqueeze(2), x.flatten()}) EXPECT_EQ(storage_of(v), storage_of(x));
  // A view of a strided tensor keeps the strides it can.
  Tensor s = arange_f32({4, 6}).slice(1, 0, 6, 2);  // [4,3] strides (6,2)
  EXPECT_EQ(s.unsqueeze(1).strides()[0], 6);
  EXPECT_EQ(s.unsqueeze(1).strides()[2], 2);
}

TEST(Tensor, ViewAndReshapeResolveMinusOne) {
  Tensor x = arange_f32({2, 3, 4});
  Tensor v = x.view({-1, 4});
  EXPECT_EQ(v.shape(), (Dims{6, 4}));
  EXPECT_EQ(v.strides(), (Dims{4, 1}));
  EXPECT_EQ(storage_of(v), storage_of(x));
  EXPECT_EQ(x.reshape({4, -1}).shape(), (Dims{4, 6}));
  expect_error([&] { x.reshape({5, -1}); }, {"reshape", "f32[2,3,4]"});
  expect_error([&] { x.view({-1, -1}); }, {"view", "-1"});
  expect_error([&] { x.reshape({7}); }, {"reshape", "f32[2,3,4]", "[7]"});
  // A permuted tensor whose merged dims stay contiguous within themselves is still viewable.
  Tensor p = x.permute({1, 2, 0});  // [3,4,2] strides (4,1,12): dims 0,1 merge
  Tensor pv = p.view({12, 2});
  EXPECT_EQ(pv.strides(), (Dims{1, 12}));
  EXPECT_EQ(storage_of(pv), storage_of(x));
}

TEST(Tensor, ReshapeOfANonViewableTensorCopiesAndViewThrows) {
  manual_seed(1);
  Tensor x = randn({3, 4}).t();  // [4,3] strides (1,4)
  Tensor r = x.reshape({12});
  EXPECT_NE(storage_of(r), storage_of(x));
  EXPECT_TRUE(r.is_contiguous());
  std::vector<double> xv = x.to_vector<double>();
  expect_close(r, xv, 0, 0);
  expect_error([&] { x.view({12}); }, {"view", "f32[4,3]", "reshape"});
  // Broadcast dims have stride 0 and cannot merge with their neighbours either.
  Tensor e = from_vector<float>({1, 2, 3}).expand({2, 3});
  expect_close(e.reshape({6}), {1, 2, 3, 1, 2, 3}, 0, 0);
  EXPECT_NE(storage_of(e.reshape({6})), storage_of(e));
  expect_error([&] { e.view({6}); }, {"view", "f32[2,3]"});
  Tensor cols = arange_f32({4, 6}).slice(1, 1, 3);  // [4,2] rows 6 apart
  expect_close(cols.reshape({8}), {1, 2, 7, 8, 13, 14, 19, 20}, 0, 0);
  expect_error([&] { cols.view({8}); }, {"view", "f32[4,2]"});
  EXPECT_EQ(cols.view({2, 2, 2}).strides(), (Dims{12, 6, 1}));  // splitting a dim is a view
}

TEST(Tensor, ContiguousCopiesOnlyWhenNeeded) {
  manual_seed(2);
  Tensor x = randn({5, 7});
  EXPECT_EQ(storage_of(x.contiguous()), storage_of(x));
  Tensor t = x.t();
  Tensor c = t.contiguous();
  EXPECT_NE(storage_of(c), storage_of(x));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), (Dims{5, 1}));
  std::vector<double> xv = x.to_vector<double>(), want;
  for (int j = 0; j < 7; ++j)
    for (int i = 0; i < 5; ++i) want.push_back(xv[i * 7 + j]);
  expect_close(c, want, 0, 0);
  EXPECT_TRUE(x.slice(0, 1, 3).is_contiguous());  // a row range stays contiguous
  EXPECT_FALSE(x.slice(1, 0, 3).is_contiguous());
}

TEST(Tensor, CloneIsAnIndependentCopy) {
  manual_seed(3);
  Tensor x = randn({4, 4});
  Tensor c = x.slice(0, 0, 4, 2).clone();
  EXPECT_NE(storage_of(c), storage_of(x));
  std::vector<double> before = c.to_vector<double>();
  x.data<float>()[0] = 123.0f;
  EXPECT_EQ(x[0][0].item<float>(), 123.0f);
  expect_close(c, before, 0, 0);
}

TEST(Tensor, CastToIntegersTruncatesSaturatesAndMapsNanToZero) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  Tensor x = from_vector<float>({2.7f, -2.7f, 0.5f, -0.5f, 1e20f, -1e20f, inf, -inf, nan, 3e9f});
  EXPECT_EQ(x.to(i32).to_vector<int32_t>(),
            (std::vector<int32_t>{2, -2, 0, 0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0, INT32_MAX}));
  EXPECT_EQ(x.to(i64).to_vector<int64_t>(),
            (std::vector<int64_t>{2, -2, 0, 0, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 0, 3000000000LL}));
  EXPECT_EQ(x.to(u8).to_vector<uint8_t>(), (std::vector<uint8_t>{2, 0, 0, 0, 255, 0, 255, 0, 0, 255}));
  std::vector<bool> b = from_vector<float>({0.0f, -0.0f, 0.25f, -3.0f, nan, inf}).to(boolean).to_vector<bool>();
  EXPECT_EQ(b, (std::vector<bool>{false, false, true, true, true, true}));
  EXPECT_EQ(from_vector<int64_t>({0, 5, -1}).to(boolean).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(from_vector<bool>({true, false}).to(f32).to_vector<float>(), (std::vector<float>{1, 0}));
  Tensor same = x.to(f32);
  EXPECT_EQ(storage_of(same), storage_of(x));
}

TEST(Tensor, ItemAndToVectorConvertAndReadInLogicalOrder) {
  Tensor x = arange_f32({2, 3});
  EXPECT_EQ(x.t().to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(x[1][2].item<int32_t>(), 5);
  EXPECT_EQ(scalar_tensor(2.5).item<double>(), 2.5);
  EXPECT_EQ(full({1, 1}, 3, f16).item<float>(), 3.0f);
  expect_error([&] { x.item<float>(); }, {"item", "f32[2,3]", "6"});
  expect_error([&] { x.data<double>(); }, {"data", "f32[2,3]", "f64"});
}

TEST(Tensor, NegativeDimsCountFromTheEnd) {
  Tensor x = arange_f32({2, 3, 4});
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.size(-3), 2);
  EXPECT_EQ(x.stride(-2), 4);
  EXPECT_EQ(x.select(-1, 1).shape(), (Dims{2, 3}));
  EXPECT_EQ(x.narrow(-2, 1, 2).shape(), (Dims{2, 2, 4}));
  expect_error([&] { x.size(-4); }, {"size", "-4", "rank 3"});
  expect_error([&] { x.transpose(0, 3); }, {"transpose", "3", "rank 3"});
}

TEST(Tensor, OutOfRangeErrorsNameTheOpAndTheShape) {
  Tensor x = zeros({2, 3});
  expect_error([&] { x.select(0, 5); }, {"select", "index 5", "f32[2,3]"});
  expect_error([&] { x.select(1, -4); }, {"select", "-4", "f32[2,3]"});
  expect_error([&] { x.select(2, 0); }, {"select", "dim 2"});
  expect_error([&] { x.permute({0, 0}); }, {"permute", "f32[2,3]"});
  expect_error([&] { x.permute({0}); }, {"permute", "f32[2,3]"});
  expect_error([&] { x.unsqueeze(3); }, {"unsqueeze", "3"});
  expect_error([&] { x.flatten(1, 0); }, {"flatten"});
  expect_error([&] { scalar_tensor(1.0).select(0, 0); }, {"select", "0-d"});
  expect_error([&] { zeros({-1}); }, {"negative", "[-1]"});
  // A zero dim does not make huge ones fine: their strides would overflow.
  expect_error([&] { zeros({0, int64_t{1} << 40, int64_t{1} << 40}); }, {"empty", "too large"});
  EXPECT_EQ(zeros({0, int64_t{1} << 40}).strides(), (Dims{int64_t{1} << 40, 1}));
}
