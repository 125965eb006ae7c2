// tests/unit/movement_test.cpp -- copies that move data: cat, stack, pad, gather, index_select,
// embedding, one_hot and broadcasting.
#include <gtest/gtest.h>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::all_indices;
using kiln::test::expect_close;
using kiln::test::expect_error;
using kiln::test::flat_index;

namespace {

// cat along `dim` by index arithmetic on the flattened inputs.
std::vector<double> cat_reference(const std::vector<Tensor>& xs, int64_t dim, const Dims& out_shape) {
  std::vector<double> out;
  for (const auto& idx : all_indices(out_shape)) {
    int64_t i = idx[dim];
    for (const Tensor& x : xs) {
      if (i < x.shape()[dim]) {
        std::vector<int64_t> j = idx;
        j[dim] = i;
        out.push_back(x.to_vector<double>()[flat_index(j, x.shape())]);
        break;
      }
      i -= x.shape()[dim];
    }
  }
  return out;
}

}  // namespace

TEST(Cat, JoinsAlongEveryDimIncludingNegativeOnes) {
  manual_seed(1);
  Tensor a = randn({2, 3, 4}), b = randn({2, 3, 4});
  for (int64_t d = -3; d < 3; ++d) {
    int64_t dd = d < 0 ? d + 3 : d;
    Tensor c = randn([&] {
      Dims s = {2, 3, 4};
      s[dd] = 5;
      return s;
    }());
    Tensor out = cat({a, c, b}, d);
    Dims want_shape = {2, 3, 4};
    want_shape[dd] = 2 * a.shape()[dd] + 5;
    ASSERT_EQ(out.shape(), want_shape);
    expect_close(out, cat_reference({a, c, b}, dd, want_shape), 0, 0);
  }
}

TEST(Cat, ReadsNonContiguousInputsAndPromotesDtypes) {
  manual_seed(2);
  Tensor a = randn({4, 3}).t();                // [3,4], strided
  Tensor b = randint(-5, 5, {3, 2}, i32);      // promotes to f32
  Tensor c = randn({3, 8}).slice(1, 0, 8, 4);  // [3,2] step 2
  Tensor out = cat({a, b, c}, 1);
  EXPECT_EQ(out.type().str(), "f32[3,8]");
  expect_close(out, cat_reference({a, b.to(f32), c}, 1, {3, 8}), 0, 0);
  EXPECT_EQ(cat({zeros({2}, i32), ones({1}, f64)}).dtype(), f64);
  EXPECT_EQ(cat({zeros({2}, boolean), ones({1}, u8)}).dtype(), u8);
  EXPECT_EQ(cat({zeros({2}, i32), zeros({0}, i32)}).shape(), (Dims{2}));
}

TEST(Cat, RejectsShapesThatDifferOutsideTheDim) {
  expect_error([] { cat({zeros({2, 3}), zeros({2, 4})}, 0); }, {"cat", "f32[2,3]", "f32[2,4]"});
  expect_error([] { cat({zeros({2, 3}), zeros({2, 3, 1})}, 0); }, {"cat", "f32[2,3]", "f32[2,3,1]"});
  expect_error([] { cat({zeros({2, 3}), zeros({2, 3})}, 2); }, {"cat", "dim 2"});
  expect_error([] { cat({scalar_tensor(1.0), scalar_tensor(2.0)}); }, {"cat", "0-d"});
  expect_error([] { cat(std::span<const Tensor>{}); }, {"cat"});
}

TEST(Stack, InsertsANewDim) {
  manual_seed(3);
  Tensor a = randn({2, 3}), b = randn({2, 3}), c = randn({2, 3});
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  const std::vector<double>* parts[3] = {&av, &bv, &cv};
  for (int64_t d = -3; d < 3; ++d) {
    Tensor s = stack({a, b, c}, d);
    int64_t dd = d < 0 ? d + 3 : d;
    Dims want_shape = {2, 3};
    want_shape.insert(static_cast<size_t>(dd), 3);
    ASSERT_EQ(s.shape(), want_shape);
    std::vector<double> want;
    for (const auto& idx : all_indices(want_shape)) {
      std::vector<int64_t> j = idx;
      int64_t which = j[dd];
      j.erase(j.begin() + dd);
      want.push_back((*parts[which])[j[0] * 3 + j[1]]);
    }
    expect_close(s, want, 0, 0);
  }
  expect_error([&] { stack({a, zeros({3, 2})}); }, {"stack", "f32[2,3]", "f32[3,2]"});
}

TEST(Pad, GrowsAndCropsWithAFillValue) {
  manual_seed(4);
  Tensor x = randn({3, 4, 5});
  // (last dim before, after), (middle dim before, after): pad, crop, or both.
  const Dims cases[] = {{1, 2}, {2, 0, 0, 3}, {-1, 2, 1, -2}, {-2, -1, -1, -1}, {0, 0, 0, 0, 1, 1}, {3, -4}};
  for (const Tensor& in : {x, randn({5, 4, 3}).transpose(0, 2)}) {
    std::vector<double> xv = in.to_vector<double>();
    for (const Dims& pads : cases) {
      Tensor y = pad(in, pads, 1.5);
      Dims want_shape = x.shape();
      for (size_t i = 0; i < pads.size() / 2; ++i) want_shape[2 - i] += pads[2 * i] + pads[2 * i + 1];
      ASSERT_EQ(y.shape(), want_shape) << shape_str(pads);
      std::vector<double> want;
      for (const auto& idx : all_indices(want_shape)) {
        std::vector<int64_t> from = idx;
        bool inside = true;
        for (size_t i = 0; i < pads.size() / 2; ++i) {
          from[2 - i] -= pads[2 * i];
          inside = inside && from[2 - i] >= 0 && from[2 - i] < x.shape()[2 - i];
        }
        want.push_back(inside ? xv[flat_index(from, x.shape())] : 1.5);
      }
      expect_close(y, want, 0, 0);
    }
  }
  Tensor i = pad(from_vector<int32_t>({1, 2}), {1, 1}, 9);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{9, 1, 2, 9}));
  expect_error([&] { pad(x, {1}); }, {"pad", "[1]"});
  expect_error([&] { pad(x, {-3, -3}); }, {"pad", "negative"});
  expect_error([&] { pad(x, {0, 0, 0, 0, 0, 0, 0, 0}); }, {"pad"});
}

TEST(Gather, PicksAlongADimLikeTorchGather) {
  manual_seed(5);
  Tensor x = randn({4, 5, 6});
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t dim = -3; dim < 3; ++dim) {
    int64_t d = dim < 0 ? dim + 3 : dim;
    Dims ishape = {3, 4, 5};
    ishape[d] = 7;  // along dim the index may be longer than the input
    Tensor idx = randint(-x.shape()[d], x.shape()[d], ishape);
    Tensor out = gather(x, dim, idx);
    ASSERT_EQ(out.shape(), ishape);
    std::vector<int64_t> iv = idx.to_vector<int64_t>();
    std::vector<double> want;
    for (const auto& pos : all_indices(ishape)) {
      std::vector<int64_t> src = pos;
      int64_t k = iv[flat_index(pos, ishape)];
      src[d] = k < 0 ? k + x.shape()[d] : k;
      want.push_back(xv[flat_index(src, x.shape())]);
    }
    expect_close(out, want, 0, 0);
    expect_close(gather(x, dim, idx.to(i32)), want, 0, 0);
  }
  // A transposed input and a broadcast-strided index.
  Tensor xt = x.permute({2, 0, 1});  // [6,4,5]
  Tensor idx = from_vector<int64_t>({5, 0, -1, 2}, {1, 4, 1}).expand({2, 4, 3});
  Tensor out = gather(xt, 0, idx);
  for (const auto& p : all_indices({2, 4, 3})) {
    int64_t k = std::vector<int64_t>{5, 0, 5, 2}[p[1]];
    EXPECT_EQ(out[p[0]][p[1]][p[2]].item<float>(), xt[k][p[1]][p[2]].item<float>());
  }
}

TEST(Gather, RejectsOutOfRangeIndicesAndBadShapes) {
  Tensor x = zeros({3, 4});
  expect_error([&] { gather(x, 1, from_vector<int64_t>({0, 4}, {1, 2})); }, {"gather", "index 4"});
  expect_error([&] { gather(x, 0, from_vector<int64_t>({-4}, {1, 1})); }, {"gather", "-4"});
  // Large enough to run on several threads: the error still comes back as kiln::Error.
  Tensor big = zeros({1 << 18, 2});
  Tensor idx = zeros({1 << 18, 2}, i64);
  idx.data<int64_t>()[(1 << 18) + 7] = 2;
  expect_error([&] { gather(big, 1, idx); }, {"gather", "index 2"});
  expect_error([&] { gather(x, 0, zeros({1, 1}, f32)); }, {"gather", "integer"});
  expect_error([&] { gather(x, 0, zeros({2}, i64)); }, {"gather", "rank"});
  expect_error([&] { gather(x, 0, zeros({2, 5}, i64)); }, {"gather", "i64[2,5]", "f32[3,4]"});
  expect_error([&] { gather(x, 2, zeros({1, 1}, i64)); }, {"gather", "dim 2"});
}

TEST(IndexSelect, PicksWholeSlices) {
  manual_seed(6);
  Tensor x = randn({5, 6, 7}).transpose(0, 2);  // [7,6,5], strided
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t dim = 0; dim < 3; ++dim) {
    Tensor idx = randint(-x.shape()[dim], x.shape()[dim], {9});
    Tensor out = index_select(x, dim - 3 * (dim % 2), idx);  // odd dims given negatively
    Dims ws = x.shape();
    ws[dim] = 9;
    ASSERT_EQ(out.shape(), ws);
    std::vector<int64_t> iv = idx.to_vector<int64_t>();
    std::vector<double> want;
    for (const auto& p : all_indices(ws)) {
      std::vector<int64_t> src = p;
      int64_t k = iv[p[dim]];
      src[dim] = k < 0 ? k + x.shape()[dim] : k;
      want.push_back(xv[flat_index(src, x.shape())]);
    }
    expect_close(out, want, 0, 0);
  }
  EXPECT_EQ(index_select(x, 0, zeros({0}, i64)).shape(), (Dims{0, 6, 5}));
  expect_error([&] { index_select(x, 1, from_vector<int32_t>({6})); }, {"index_select", "6"});
  expect_error([&] { index_select(x, 0, zeros({2, 2}, i64)); }, {"index_select", "1-d"});
}

TEST(Embedding, LooksUpRowsForIndicesOfAnyShape) {
  manual_seed(7);
  Tensor w = randn({10, 4});
  std::vector<double> wv = w.to_vector<double>();
  Tensor idx = randint(0, 10, {2, 3});
  Tensor e = embedding(idx, w);
  ASSERT_EQ(e.shape(), (Dims{2, 3, 4}));
  std::vector<double> want;
  for (int64_t k : idx.to_vector<int64_t>())
    for (int j = 0; j < 4; ++j) want.push_back(wv[k * 4 + j]);
  expect_close(e, want, 0, 0);
  expect_error([&] { embedding(from_vector<int64_t>({10}), w); }, {"index_select", "10"});
  expect_error([&] { embedding(idx, zeros({10})); }, {"embedding", "f32[10]"});
}

TEST(OneHot, MarksEachIndexWithAOne) {
  Tensor idx = from_vector<int64_t>({2, 0, 1, 2, 4, 0}, {2, 3});
  Tensor h = one_hot(idx);
  ASSERT_EQ(h.type().str(), "i64[2,3,5]");
  std::vector<int64_t> hv = h.to_vector<int64_t>(), iv = idx.to_vector<int64_t>();
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(hv[i * 5 + c], iv[i] == c ? 1 : 0);
  EXPECT_EQ(one_hot(from_vector<int32_t>({1}), 3).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
  expect_error([&] { one_hot(idx, 3); }, {"one_hot", "[0, 3)"});
  expect_error([] { one_hot(from_vector<int64_t>({-1}), 3); }, {"one_hot"});
  expect_error([] { one_hot(zeros({2})); }, {"one_hot", "f32[2]"});
}

TEST(BroadcastTo, RepeatsSizeOneDimsWithoutCopying) {
  manual_seed(8);
  Tensor x = randn({3, 1});
  Tensor b = broadcast_to(x, {2, 3, 4});
  EXPECT_EQ(b.strides(), (Dims{0, 1, 0}));
  std::vector<double> xv = x.to_vector<double>(), want;
  for (const auto& p : all_indices({2, 3, 4})) want.push_back(xv[p[1]]);
  expect_close(b, want, 0, 0);
  expect_close(b.contiguous(), want, 0, 0);
  EXPECT_EQ(broadcast_shapes({3, 1}, {4}), (Dims{3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 1}), (Dims{2, 1}));
  expect_error([&] { broadcast_to(x, {3, 2, 2}); }, {"expand", "f32[3,1]"});
  expect_error([&] { broadcast_to(x, {1}); }, {"expand", "f32[3,1]"});
  expect_error([] { broadcast_shapes({3}, {4}, "myop"); }, {"myop", "[3]", "[4]"});
  expect_error([&] { x + zeros({4, 2}); }, {"[3,1]", "[4,2]"});
}
