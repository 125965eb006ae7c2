// tests/unit/scatter_test.cpp -- scatter_add, index_add and embedding's backward against
// double-precision references: every dim, repeated and negative indices, strided views of
// every operand, several dtypes; the same bits on any number of threads; errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/op.h"
#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::all_indices;
using kiln::test::bits;
using kiln::test::expect_error;
using kiln::test::flat_index;

namespace {

// A tensor of `shape` whose strides are not row-major (`layout` 1: its dims stored in the
// order 2,0,1; 2: every other element of a wider tensor), or a contiguous one (`layout` 0).
Tensor with_layout(const Tensor& t, int layout) {
  if (layout == 1 && t.dim() == 3) return t.permute({1, 2, 0}).contiguous().permute({2, 0, 1});
  if (layout == 2 && t.dim() >= 1) {
    Tensor wide = cat({t.unsqueeze(-1), t.unsqueeze(-1)}, -1).flatten(-2);
    return wide.slice(-1, 0, wide.shape()[wide.dim() - 1], 2);
  }
  return t.contiguous();
}

Tensor random_values(const Dims& shape, DType t) {
  if (is_float(t)) return (randn(shape, f64) * 3.0).to(t);
  return randint(-50, 50, shape, i64).to(t);
}

// x with src[p] added at p with p[dim] replaced by index[p] (torch.scatter_add), in double.
std::vector<double> scatter_reference(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& src,
                                      std::vector<double>* scale) {
  std::vector<double> out = x.to_vector<double>(), sv = src.to_vector<double>();
  std::vector<int64_t> iv = idx.to_vector<int64_t>();
  scale->assign(out.size(), 0.0);
  for (size_t i = 0; i < out.size(); ++i) (*scale)[i] = std::abs(out[i]);
  for (const auto& p : all_indices(idx.shape())) {
    int64_t f = flat_index(p, idx.shape());
    std::vector<int64_t> q = p;
    int64_t k = iv[f];
    q[dim] = k < 0 ? k + x.shape()[dim] : k;
    int64_t o = flat_index(q, x.shape());
    out[o] += sv[f];
    (*scale)[o] += std::abs(sv[f]);
  }
  return out;
}

// f16 sums in f32 and rounds once; f32 and f64 sum in their own dtype; integers are exact.
void expect_sums(const Tensor& got, const std::vector<double>& want, const std::vector<double>& scale) {
  double rtol = got.dtype() == f16 ? 1e-3 : got.dtype() == bf16 ? 8e-3 : 0;
  double stol = got.dtype() == f64 ? 1e-14 : is_float(got.dtype()) ? 1e-6 : 0;
  std::vector<double> v = got.to_vector<double>();
  ASSERT_EQ(v.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < v.size() && bad < 5; ++i) {
    double tol = rtol * std::abs(want[i]) + stol * scale[i];
    if (std::abs(v[i] - want[i]) > tol) {
      ++bad;
      ADD_FAILURE() << got.type().str() << " element " << i << ": got " << v[i] << ", expected " << want[i];
    }
  }
}

struct Threads {
  explicit Threads(int n) : saved(num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(saved); }
  int saved;
};

}  // namespace

TEST(ScatterAdd, MatchesADoubleReferenceInEveryDimDtypeAndLayout) {
  manual_seed(11);
  const Dims xs = {4, 5, 6};
  for (DType t : {f32, f64, f16, bf16, i32}) {
    for (int64_t dim = -3; dim < 3; ++dim) {
      int64_t d = dim < 0 ? dim + 3 : dim;
      Dims is = {3, 4, 5};  // smaller than x outside dim: those positions keep x's values
      is[d] = 11;           // longer than x along dim: indices repeat
      for (int layout = 0; layout < 3; ++layout) {
        Tensor x = with_layout(random_values(xs, t), layout);
        Tensor src = with_layout(random_values(is, t), (layout + 1) % 3);
        Tensor idx = with_layout(randint(-xs[d], xs[d], is), (layout + 2) % 3);
        ASSERT_EQ(x.is_contiguous(), layout == 0);
        ASSERT_EQ(src.is_contiguous() || idx.is_contiguous(), layout != 0);
        Tensor out = scatter_add(x, dim, idx, src);
        ASSERT_EQ(out.type().str(), (TensorType{t, xs, cpu}).str());
        std::vector<double> scale;
        std::vector<double> want = scatter_reference(x, d, idx, src, &scale);
        SCOPED_TRACE(fmt::format("{} dim {} layout {}", dtype_name(t), dim, layout));
        expect_sums(out, want, scale);
        expect_sums(scatter_add(x, dim, idx.to(i32), src), want, scale);
      }
    }
  }
}

TEST(ScatterAdd, TakesAnExpandedIndexAndSourceInPlace) {
  manual_seed(12);
  Tensor x = randn({6, 7});
  Tensor idx = from_vector<int64_t>({5, 0, -1, 2}, {4, 1}).expand({4, 7});  // stride 0 along rows
  Tensor src = randn({1, 7}).expand({4, 7});
  std::vector<double> scale;
  std::vector<double> want = scatter_reference(x, 0, idx, src, &scale);
  expect_sums(scatter_add(x, 0, idx, src), want, scale);
  // dim 1 with an index that repeats one column for every row.
  Tensor idx1 = from_vector<int64_t>({3, 3, -4, 0, 6}, {1, 5}).expand({6, 5});
  Tensor src1 = randn({5, 6}).t();
  want = scatter_reference(x, 1, idx1, src1, &scale);
  expect_sums(scatter_add(x, 1, idx1, src1), want, scale);
}

// A broadcast zero start (what gradient rules pass) is not copied: each row of the result is
// cleared as the scatter reaches it when src covers every row (dim innermost, as for a gather's
// gradient), else the whole result is cleared first. Both, in every float dtype and with an
// empty src, match the reference from a real zero tensor.
TEST(ScatterAdd, StartsFromABroadcastZeroRowByRowOrWhole) {
  manual_seed(14);
  for (DType t : {f32, f64, f16, bf16}) {
    for (const Dims& is : {Dims{4, 5, 9}, Dims{3, 5, 9}, Dims{4, 5, 0}}) {
      SCOPED_TRACE(fmt::format("{} src {}", dtype_name(t), shape_str(is)));
      Tensor zero = zeros({}, t).expand({4, 5, 6});
      Tensor src = random_values(is, t), idx = randint(-6, 6, is);
      std::vector<double> scale;
      std::vector<double> want = scatter_reference(zeros({4, 5, 6}, t), 2, idx, src, &scale);
      Tensor dirty = full({4, 5, 6}, 7.0, t);  // the allocator may hand its block out again
      dirty = Tensor();
      expect_sums(scatter_add(zero, 2, idx, src), want, scale);
    }
  }
}

TEST(ScatterAdd, HandlesZeroDimAndEmptyInputs) {
  Tensor x = full({}, 2.0f);
  EXPECT_EQ(scatter_add(x, 0, full({}, -1, i64), full({}, 3.0f)).item<float>(), 5.0f);
  Tensor y = randn({3, 4});
  EXPECT_TRUE(allclose(scatter_add(y, 1, zeros({3, 0}, i64), zeros({3, 0})), y, 0, 0));
}

TEST(IndexAdd, MatchesADoubleReferenceInEveryDimDtypeAndLayout) {
  manual_seed(13);
  const Dims xs = {4, 5, 6};
  for (DType t : {f32, f64, f16, bf16, i32}) {
    for (int64_t dim = -3; dim < 3; ++dim) {
      int64_t d = dim < 0 ? dim + 3 : dim;
      Dims ss = xs;
      ss[d] = 13;
      for (int layout = 0; layout < 3; ++layout) {
        Tensor x = with_layout(random_values(xs, t), layout);
        Tensor src = with_layout(random_values(ss, t), (layout + 1) % 3);
        Tensor idx = with_layout(randint(-xs[d], xs[d], {13}), layout);
        ASSERT_EQ(x.is_contiguous(), layout == 0);
        ASSERT_EQ(idx.is_contiguous(), layout != 2);
        Tensor out = index_add(x, dim, idx, src);
        ASSERT_EQ(out.type().str(), (TensorType{t, xs, cpu}).str());
        // The same sums as scatter_add with the index broadcast over the other dims.
        Dims bs(3, 1);
        bs[d] = 13;
        std::vector<double> scale;
        std::vector<double> want = scatter_reference(x, d, idx.contiguous().reshape(bs).expand(ss), src, &scale);
        SCOPED_TRACE(fmt::format("{} dim {} layout {}", dtype_name(t), dim, layout));
        expect_sums(out, want, scale);
        expect_sums(index_add(x, dim, idx.to(i32), src), want, scale);
      }
    }
  }
}

TEST(IndexAdd, ConvertsSrcToTheInputDtypeAndKeepsOneDimensionalInputs) {
  Tensor x = zeros({5}, f64);
  Tensor out = index_add(x, 0, from_vector<int64_t>({1, 1, 4, -1}), from_vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(out.dtype(), f64);
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{0, 3, 0, 0, 7}));
  EXPECT_TRUE(allclose(index_add(x, 0, zeros({0}, i64), zeros({0}, f64)), x, 0, 0));
}

TEST(IndexAdd, RejectsBadIndicesShapesAndDtypes) {
  Tensor x = zeros({3, 4});
  expect_error(
      [&] {
        index_add(x, 0, from_vector<int64_t>({0, 3}), zeros({2, 4}));
      },
      {"index_add", "index 3", "size 3"});
  expect_error([&] { index_add(x, 1, from_vector<int64_t>({-5}), zeros({3, 1})); }, {"index_add", "-5", "size 4"});
  // Large enough to run on several threads: still one kiln::Error.
  Tensor big = zeros({1 << 10, 256});
  Tensor idx = zeros({1 << 12}, i64);
  idx.data<int64_t>()[1000] = 1 << 10;
  expect_error([&] { index_add(big, 0, idx, ones({1 << 12, 256})); }, {"index_add", "index 1024"});
  expect_error([&] { index_add(x, 0, zeros({2}, f32), zeros({2, 4})); }, {"index_add", "integer", "f32[2]"});
  expect_error([&] { index_add(x, 0, zeros({2, 1}, i64), zeros({2, 4})); }, {"index_add", "1-d"});
  expect_error([&] { index_add(x, 0, zeros({2}, i64), zeros({2, 5})); }, {"index_add", "f32[2,5]", "f32[3,4]"});
  expect_error([&] { index_add(x, 0, zeros({2}, i64), zeros({3, 4})); }, {"index_add", "length 2"});
  expect_error([&] { index_add(x, 0, zeros({2}, i64), zeros({2, 4, 1})); }, {"index_add", "f32[2,4,1]"});
  expect_error([&] { index_add(x, 2, zeros({2}, i64), zeros({2, 4})); }, {"index_add", "dim 2"});
  expect_error([&] { index_add(zeros({}), 0, zeros({1}, i64), zeros({1})); }, {"index_add", "dim"});
}

TEST(ScatterAdd, RejectsBadIndicesShapesAndDtypes) {
  Tensor x = zeros({3, 4});
  expect_error(
      [&] {
        scatter_add(x, 0, from_vector<int64_t>({3}, {1, 1}), zeros({1, 1}));
      },
      {"scatter_add", "index 3", "size 3"});
  expect_error([&] { scatter_add(x, 1, from_vector<int64_t>({-5}, {1, 1}), zeros({1, 1})); }, {"scatter_add", "-5"});
  Tensor big = zeros({1 << 10, 256});
  Tensor idx = zeros({1 << 10, 256}, i64);
  idx.data<int64_t>()[5000] = -(1 << 10) - 1;
  expect_error([&] { scatter_add(big, 0, idx, ones({1 << 10, 256})); }, {"scatter_add", "index -1025"});
  expect_error([&] { scatter_add(x, 0, zeros({1, 1}, f32), zeros({1, 1})); }, {"scatter_add", "integer"});
  expect_error([&] { scatter_add(x, 0, zeros({1, 2}, i64), zeros({1, 3})); }, {"scatter_add", "i64[1,2]", "f32[1,3]"});
  expect_error([&] { scatter_add(x, 0, zeros({1, 5}, i64), zeros({1, 5})); }, {"scatter_add", "larger", "dim 1"});
  expect_error([&] { scatter_add(x, 0, zeros({2}, i64), zeros({2})); }, {"scatter_add", "rank"});
  expect_error(
      [&] {
        apply(OpId::ScatterAdd, {x, zeros({1, 1}, i64), zeros({1, 1}, f64)}, {});
      },
      {"scatter_add", "f64[1,1]", "dtype"});
  expect_error(
      [&] {
        apply(OpId::IndexAdd, {x, zeros({1}, i64), zeros({1, 4}, f64)}, {});
      },
      {"index_add", "f64[1,4]", "dtype"});
}

// Many repeated indices on large inputs: the sums equal a serial f32 loop in index order, bit
// for bit, whatever the number of threads.
// From a broadcast zero (embedding's gradient) index_add runs slice by slice where each
// out.select(dim, k) is contiguous (dims before dim all of size 1): the same bits as from a
// real zero tensor (the generic path), on 1 and 2 threads; elsewhere it falls back.
TEST(IndexAdd, FromABroadcastZeroGivesTheGenericPathsBits) {
  manual_seed(15);
  for (DType t : {f32, f64, i32, i64}) {
    for (auto [xs, dim] :
         {std::pair<Dims, int64_t>{{40, 7}, 0}, {{2000, 64}, 0}, {{1, 1, 30, 3, 2}, 2}, {{4, 30}, 1}}) {
      SCOPED_TRACE(fmt::format("{} {} dim {}", dtype_name(t), shape_str(xs), dim));
      Dims ss = xs;
      ss[dim] = 500;
      Tensor src = random_values(ss, t), idx = randint(-xs[dim], xs[dim], {500});
      std::vector<uint8_t> want = bits(index_add(zeros(xs, t), dim, idx, src));
      for (int threads : {1, 2}) {
        Threads guard(threads);
        EXPECT_EQ(bits(index_add(zeros({}, t).expand(xs), dim, idx, src)), want) << threads << " threads";
        EXPECT_EQ(bits(index_add(zeros({}, t).expand(xs), dim, idx.to(i32), src)), want) << threads << " threads";
      }
    }
  }
  test::expect_error(
      [] {
        index_add(zeros({}).expand({5, 3}), 0, from_vector<int64_t>({1, 5}), zeros({2, 3}));
      },
      {"index_add", "index 5", "size 5"});
}

TEST(IndexAdd, GivesTheSameBitsOnAnyThreadCount) {
  manual_seed(14);
  Tensor x = randn({300, 96});
  Tensor idx = randint(0, 40, {20000});  // each row hit about 500 times
  Tensor src = randn({20000, 96});
  std::vector<float> want = x.to_vector<float>();
  std::vector<int64_t> iv = idx.to_vector<int64_t>();
  std::vector<float> sv = src.to_vector<float>();
  for (size_t j = 0; j < iv.size(); ++j)
    for (int c = 0; c < 96; ++c) want[iv[j] * 96 + c] += sv[j * 96 + c];
  std::vector<uint8_t> one, two;
  {
    Threads t(1);
    one = bits(index_add(x, 0, idx, src));
  }
  {
    Threads t(2);
    two = bits(index_add(x, 0, idx, src));
  }
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, bits(from_vector(want, {300, 96})));
  // Along the last dim, with a transposed source.
  Tensor srct = randn({20000, 96}).t();
  Tensor idx1 = randint(0, 7, {20000});
  {
    Threads t(1);
    one = bits(index_add(zeros({96, 300}), 1, idx1, srct));
  }
  {
    Threads t(2);
    two = bits(index_add(zeros({96, 300}), 1, idx1, srct));
  }
  EXPECT_EQ(one, two);
}

TEST(ScatterAdd, GivesTheSameBitsOnAnyThreadCount) {
  manual_seed(15);
  for (int64_t dim = 0; dim < 2; ++dim) {
    Dims is = dim == 0 ? Dims{4000, 64} : Dims{64, 4000};
    Tensor x = randn({64, 64});
    Tensor idx = randint(0, 8, is);
    Tensor src = randn(is);
    std::vector<float> want = x.to_vector<float>();
    std::vector<int64_t> iv = idx.to_vector<int64_t>();
    std::vector<float> sv = src.to_vector<float>();
    for (int64_t f = 0; f < is.product(); ++f) {  // row-major order: index order along either dim
      int64_t r = f / is[1], c = f % is[1];
      (dim == 0 ? want[iv[f] * 64 + c] : want[r * 64 + iv[f]]) += sv[f];
    }
    std::vector<uint8_t> one, two;
    {
      Threads t(1);
      one = bits(scatter_add(x, dim, idx, src));
    }
    {
      Threads t(2);
      two = bits(scatter_add(x, dim, idx, src));
    }
    EXPECT_EQ(one, two) << "dim " << dim;
    EXPECT_EQ(one, bits(from_vector(want, {64, 64}))) << "dim " << dim;
  }
}

// embedding's backward is index_add over the rows of the weight.
TEST(Embedding, BackwardSumsTheGradientOfEachRowItPicked) {
  manual_seed(16);
  Tensor w = randn({50, 24}).requires_grad_();
  Tensor idx = randint(0, 50, {8, 300});
  Tensor g = randn({8, 300, 24});
  Tensor e = embedding(idx, w);
  e.backward(g);
  std::vector<double> want(50 * 24, 0.0), scale(50 * 24, 0.0);
  std::vector<int64_t> iv = idx.to_vector<int64_t>();
  std::vector<double> gv = g.to_vector<double>();
  for (size_t t = 0; t < iv.size(); ++t)
    for (int c = 0; c < 24; ++c) {
      want[iv[t] * 24 + c] += gv[t * 24 + c];
      scale[iv[t] * 24 + c] += std::abs(gv[t * 24 + c]);
    }
  ASSERT_TRUE(w.grad().defined());
  expect_sums(w.grad(), want, scale);
}
