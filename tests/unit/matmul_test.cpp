// tests/unit/matmul_test.cpp -- matmul and linear against a naive double-precision product, over
// NumPy's shape rules, strided operands, the threaded split and every dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "runtime/ops/gemm.h"
#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::all_indices;
using kiln::test::expect_error;

namespace {

struct Product {
  Dims shape;
  std::vector<double> value, magnitude;  // magnitude: sum of |a||b|, for rounding bounds
};

// NumPy matmul in double with plain loops: 1-d operands gain and lose a dim, batch dims
// broadcast from the right.
Product reference_matmul(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Dims sa = a.shape(), sb = b.shape();
  if (a.dim() == 1) sa.insert(0, 1);
  if (b.dim() == 1) sb.push_back(1);
  int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  size_t ra = sa.size() - 2, rb = sb.size() - 2, r = std::max(ra, rb);
  Dims batch(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + ra >= r ? sa[i + ra - r] : 1, db = i + rb >= r ? sb[i + rb - r] : 1;
    batch[i] = std::max(da, db);
  }
  // Offset of matrix `bi` in an operand whose batch dims are `s[0..rank)`.
  auto matrix_offset = [&](const std::vector<int64_t>& bi, const Dims& s, size_t rank) {
    int64_t off = 0;
    for (size_t i = 0; i < rank; ++i) off = off * s[i] + (s[i] == 1 ? 0 : bi[i + r - rank]);
    return off * s[rank] * s[rank + 1];
  };
  Product p;
  for (const auto& bi : all_indices(batch)) {
    int64_t oa = matrix_offset(bi, sa, ra), ob = matrix_offset(bi, sb, rb);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t q = 0; q < k; ++q) {
          double x = av[oa + i * k + q], y = bv[ob + q * n + j];
          s += x * y;
          mag += std::abs(x * y);
        }
        p.value.push_back(s);
        p.magnitude.push_back(mag);
      }
  }
  p.shape = batch;
  if (a.dim() > 1) p.shape.push_back(m);
  if (b.dim() > 1) p.shape.push_back(n);
  return p;
}

// Expects c == a @ b up to rounding: k products and sums at `eps` (the compute precision),
// plus rounding the result to `out_eps`.
void expect_product(const Tensor& c, const Tensor& a, const Tensor& b, double eps, double out_eps = 0) {
  Product p = reference_matmul(a, b);
  ASSERT_EQ(c.shape(), p.shape) << a.type() << " @ " << b.type();
  std::vector<double> got = c.to_vector<double>();
  int64_t k = a.shape().back();
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    double tol = 2 * (k + 1) * eps * p.magnitude[i] + out_eps * std::abs(p.value[i]) + 1e-300;
    if (out_eps > 0) tol += 0x1p-24;  // f16's subnormal spacing
    if (!(std::abs(got[i] - p.value[i]) <= tol)) {
      ++bad;
      ADD_FAILURE() << a.type() << " @ " << b.type() << " element " << i << ": got " << got[i] << ", expected "
                    << p.value[i];
    }
  }
}

constexpr double kF32 = 0x1p-24, kF64 = 0x1p-53;

}  // namespace

TEST(Matmul, FollowsNumpyRulesForVectorsAndMatrices) {
  manual_seed(1);
  Tensor v7 = randn({7}), w7 = randn({7});
  Tensor dot = matmul(v7, w7);
  EXPECT_EQ(dot.dim(), 0);
  expect_product(dot, v7, w7, kF32);
  Tensor v5 = randn({5}), m53 = randn({5, 3}), m45 = randn({4, 5}), m57 = randn({5, 7});
  expect_product(matmul(v5, m53), v5, m53, kF32);  // [3]
  expect_product(matmul(m45, v5), m45, v5, kF32);  // [4]
  expect_product(matmul(m45, m57), m45, m57, kF32);
  expect_product(m45.matmul(m57), m45, m57, kF32);
}

TEST(Matmul, BroadcastsBatchDims) {
  manual_seed(2);
  Tensor a = randn({2, 1, 3, 4}), b = randn({5, 4, 6});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Dims{2, 5, 3, 6}));
  expect_product(c, a, b, kF32);
  Tensor v = randn({4}), bb = randn({2, 4, 3}), aa = randn({2, 3, 4});
  expect_product(matmul(v, bb), v, bb, kF32);  // [2,3]
  expect_product(matmul(aa, v), aa, v, kF32);  // [2,3]
  Tensor x = randn({3, 1, 2, 5}), y = randn({1, 4, 5, 2});
  expect_product(matmul(x, y), x, y, kF32);    // [3,4,2,2]
  Tensor e = randn({4, 3}).expand({6, 4, 3});  // stride-0 batch
  Tensor ae = aa[0].expand({6, 3, 4});
  expect_product(matmul(ae, e), ae, e, kF32);
}

TEST(Matmul, ReadsTransposedOperandsInPlace) {
  manual_seed(3);
  Tensor a = randn({5, 6}).t();                   // [6,5] strides (1,6)
  Tensor b = randn({3, 7, 5}).transpose(-1, -2);  // [3,5,7]
  expect_product(matmul(a, b), a, b, kF32);
  Tensor bt = randn({4, 5}).t();  // [5,4]
  expect_product(matmul(a, bt), a, bt, kF32);
  Tensor col = randn({9, 3}).select(1, 2);  // [9] stride 3
  Tensor m = randn({9, 9}).t();
  expect_product(matmul(m, col), m, col, kF32);
  expect_product(matmul(col, m), col, m, kF32);
}

TEST(Matmul, CopiesOperandsBlasCannotRead) {
  manual_seed(4);
  Tensor big = randn({10, 12});
  Tensor every_other = big.slice(1, 0, 12, 2);              // [10,6], column stride 2
  Tensor window = big.slice(0, 2, 8).slice(1, 3, 9);        // [6,6], leading dim 12, offset
  Tensor rows = big.slice(0, 0, 10, 3).slice(1, 0, 12, 2);  // [4,6], both strided
  expect_product(matmul(every_other, window), every_other, window, kF32);
  expect_product(matmul(rows, window.t()), rows, window.t(), kF32);
  Tensor row = big.slice(1, 5, 6).t();  // [1,10] with column stride 12
  expect_product(matmul(row, big), row, big, kF32);
  Tensor col_as_matrix = big.slice(1, 4, 5);  // [10,1] leading dim 12
  expect_product(matmul(big.t(), col_as_matrix), big.t(), col_as_matrix, kF32);
  Tensor interleaved = randn({4, 5, 6}).permute({1, 0, 2});  // [5,4,6]: batch stride 6 < 4*6
  Tensor rhs = randn({6, 3, 5}).permute({2, 0, 1});          // [5,6,3], batch stride 1
  expect_product(matmul(interleaved, rhs), interleaved, rhs, kF32);
  Tensor batched = randn({4, 6, 10}).slice(0, 0, 4, 2).transpose(1, 2);  // [2,10,6]
  expect_product(matmul(batched.transpose(1, 2), big), batched.transpose(1, 2), big, kF32);
}

TEST(Matmul, SplitsLargeProductsAcrossThreads) {
  manual_seed(5);
  int saved = num_threads();
  for (int threads : {saved, 3}) {
    set_num_threads(threads);
    Tensor a = randn({300, 200}), b = randn({200, 250});
    expect_product(matmul(a, b), a, b, kF32);  // split by rows
    Tensor at = randn({200, 300}).t();
    expect_product(matmul(at, b), at, b, kF32);
    Tensor s = randn({8, 300}), w = randn({500, 300}).t();  // few rows: split by columns
    expect_product(matmul(s, w), s, w, kF32);
    Tensor ba = randn({5, 40, 60}), bb = randn({5, 60, 50});  // many matrices: split the batch
    expect_product(matmul(ba, bb), ba, bb, kF32);
  }
  set_num_threads(saved);
}

TEST(Matmul, ComputesEveryDtype) {
  manual_seed(6);
  Tensor a = randn({17, 33}, f64), b = randn({33, 9}, f64);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.dtype(), f64);
  expect_product(c, a, b, kF64);
  Tensor big_a = randn({130, 140}, f64), big_b = randn({140, 150}, f64).t().contiguous().t();
  expect_product(matmul(big_a, big_b), big_a, big_b, kF64);
  for (DType t : {f16, bf16}) {
    Tensor h = randn({6, 40}, t), g = randn({40, 5}, t).transpose(0, 1).contiguous().t();
    Tensor r = matmul(h, g);
    EXPECT_EQ(r.dtype(), t);
    expect_product(r, h, g, kF32, t == f16 ? 0x1p-11 : 0x1p-8);
  }
  for (DType t : {i32, i64, u8}) {
    int64_t lo = t == u8 ? 0 : -50, hi = t == u8 ? 3 : 50;  // u8: keep sums inside its range
    Tensor x = randint(lo, hi, {2, 7, 11}, t), y = randint(lo, hi, {11, 4}, t);
    Tensor z = matmul(x, y.t().contiguous().t());
    EXPECT_EQ(z.dtype(), t);
    EXPECT_EQ(z.to_vector<double>(), reference_matmul(x, y).value) << dtype_name(t);  // exact
  }
  Tensor mixed = matmul(randint(0, 5, {3, 4}, i32), randn({4, 2}));
  EXPECT_EQ(mixed.dtype(), f32);
}

TEST(Matmul, GivesZerosWhenTheInnerDimIsEmpty) {
  Tensor c = matmul(empty({3, 0}), empty({0, 4}));
  EXPECT_EQ(c.shape(), (Dims{3, 4}));
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(matmul(empty({2, 3, 0}, i64), empty({0, 2}, i64)).to_vector<int64_t>(), std::vector<int64_t>(12, 0));
  EXPECT_EQ(matmul(empty({0, 5}), randn({5, 3})).shape(), (Dims{0, 3}));
  EXPECT_EQ(matmul(empty({0}), empty({0})).item<float>(), 0.0f);
}

TEST(Matmul, ErrorsNameBothOperandTypes) {
  expect_error(
      [] {
        matmul(zeros({2, 3}), zeros({4, 5}));
      },
      {"matmul", "inner dimensions differ", "f32[2,3]", "f32[4,5]"});
  expect_error([] { matmul(zeros({3}), zeros({4})); }, {"matmul", "f32[3]", "f32[4]"});
  expect_error([] { matmul(scalar_tensor(1.0), zeros({1})); }, {"matmul", "f32[]"});
  expect_error([] { matmul(zeros({2, 3, 4}), zeros({3, 4, 5})); }, {"matmul", "[2]", "[3]"});
  expect_error([] { matmul(zeros({2, 2}, boolean), zeros({2, 2}, boolean)); }, {"matmul", "bool"});
}

TEST(Linear, MultipliesByTheTransposedWeightAndAddsBias) {
  manual_seed(7);
  Tensor x = randn({4, 5}), w = randn({3, 5}), bias = randn({3});
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = bias.to_vector<double>();
  for (bool with_bias : {false, true}) {
    Tensor y = with_bias ? linear(x, w, bias) : linear(x, w);
    ASSERT_EQ(y.shape(), (Dims{4, 3}));
    std::vector<double> got = y.to_vector<double>();
    for (int i = 0; i < 4; ++i)
      for (int o = 0; o < 3; ++o) {
        double s = with_bias ? bv[o] : 0;
        for (int q = 0; q < 5; ++q) s += xv[i * 5 + q] * wv[o * 5 + q];
        EXPECT_NEAR(got[i * 3 + o], s, 1e-5);
      }
  }
  Tensor v = linear(x[1], w, bias);  // a single vector
  ASSERT_EQ(v.shape(), (Dims{3}));
  for (int o = 0; o < 3; ++o) {
    double s = bv[o];
    for (int q = 0; q < 5; ++q) s += xv[5 + q] * wv[o * 5 + q];
    EXPECT_NEAR(v[o].item<double>(), s, 1e-5);
  }
  expect_error([&] { linear(x, bias); }, {"linear", "f32[3]"});
  expect_error([&] { linear(x, randn({3, 4})); }, {"matmul", "f32[4,5]", "f32[4,3]"});
}

// Every way BLAS can be handed a matrix: row- or column-major, sliced, and size-1 dims whose
// strides are arbitrary (a slice of a transposed tensor, as a traced graph's memory plan makes).
// A size-1 dim's stride must never reach BLAS as a leading dimension.
TEST(Matmul, ReadsEveryLayoutIncludingSize1DimsWithOddStrides) {
  manual_seed(8);
  Tensor base = randn({9, 11, 13});
  auto views = [&](int64_t r, int64_t c) {
    std::vector<Tensor> v;
    v.push_back(randn({r, c}));                                                       // row-major
    v.push_back(randn({c, r}).t());                                                   // column-major
    v.push_back(base.select(0, 2).slice(0, 1, 1 + r).slice(1, 2, 2 + c));             // ld 13
    v.push_back(base.select(2, 3).slice(0, 0, r).slice(1, 1, 1 + c));                 // both strided
    v.push_back(base.permute({2, 1, 0}).select(2, 4).slice(0, 0, r).slice(1, 0, c));  // ld 13*11
    v.push_back(randn({r, 1, c}).select(1, 0));                                       // row stride c
    v.push_back(randn({c, 9}).t().slice(0, 3, 3 + r));                                // transposed slice
    return v;
  };
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 4},
                         {4, 1, 5},
                         {5, 4, 1},
                         {1, 1, 6},
                         {1, 6, 1},
                         {6, 1, 1},
                         {1, 1, 1},
                         {3, 4, 5}}) {
    std::vector<Tensor> as = views(m, k), bs = views(k, n);
    for (const Tensor& a : as)
      for (const Tensor& b : bs) {
        SCOPED_TRACE(::testing::Message() << a.type() << " strides " << shape_str(a.strides()) << " @ " << b.type()
                                          << " strides " << shape_str(b.strides()));
        expect_product(matmul(a, b), a, b, kF32);
        expect_product(matmul(a.to(f64), b.to(f64)), a.to(f64), b.to(f64), kF64);
      }
  }
  // Batched operands whose matrices have size-1 dims with odd strides.
  Tensor x = randn({4, 7, 3}).transpose(1, 2).slice(1, 1, 2);  // [4,1,7] row stride 1
  Tensor w = randn({5, 7}).t();                                // [7,5] column-major
  expect_product(matmul(x, w), x, w, kF32);
  Tensor y = randn({3, 6, 4}).permute({2, 0, 1}).slice(2, 2, 3);  // [4,3,1], column stride 24
  Tensor z = randn({4, 2, 3});
  expect_product(matmul(z, y), z, y, kF32);
}

TEST(Matmul, FoldsABatchAgainstOneWeightIntoOneProduct) {
  manual_seed(9);
  for (const Tensor& x :
       {randn({3, 4, 5, 6}), randn({4, 3, 5, 6}).transpose(0, 1), randn({3, 4, 6, 5}).transpose(-1, -2),
        randn({1, 4, 1, 6}), randn({3, 1, 1, 6}).expand({3, 4, 5, 6})}) {
    SCOPED_TRACE(::testing::Message() << x.type() << " strides " << shape_str(x.strides()));
    Tensor w = randn({6, 7});
    expect_product(matmul(x, w), x, w, kF32);
    expect_product(matmul(x, w.t().contiguous().t()), x, w, kF32);
    Tensor wb = w.expand({4, 6, 7});  // a weight broadcast over a batch dim folds too
    expect_product(matmul(x, wb), x, wb, kF32);
  }
}

TEST(Matmul, SplitsProductsPastBlasIntLimit) {
  // The limit is lowered so that small products take the split paths a >2^31 dim would.
  manual_seed(10);
  for (int64_t limit : {1, 3, 7}) {
    gemm::set_blas_int_limit_for_testing(limit);
    Tensor a = randn({9, 10}), b = randn({10, 8});
    expect_product(matmul(a, b), a, b, kF32);
    expect_product(matmul(a.t().contiguous().t(), b.t().contiguous().t()), a, b, kF32);
    Tensor ba = randn({3, 5, 9}), bb = randn({9, 4});
    expect_product(matmul(ba, bb), ba, bb, kF32);
    Tensor wide = randn({2, 12}), tall = randn({12, 11}).t().contiguous().t();
    expect_product(matmul(wide, tall), wide, tall, kF32);
  }
  gemm::set_blas_int_limit_for_testing(0);
}

TEST(Matmul, GemmWritesAnyResultLayoutAndAccumulates) {
  manual_seed(11);
  for (int64_t limit : {0, 4}) {
    gemm::set_blas_int_limit_for_testing(limit);
    std::vector<double> a(6 * 5), b(5 * 7);
    for (double& v : a) v = randn({}).item<double>();
    for (double& v : b) v = randn({}).item<double>();
    // c is written through a column stride of 2 (neither layout BLAS can write), then added to.
    std::vector<double> c(6 * 7 * 2, 1.0);
    gemm::Mat<const double> ma{a.data(), 6, 5, 5, 1}, mb{b.data(), 5, 7, 1, 5};
    gemm::gemm<double>(ma, mb, {c.data(), 6, 7, 14, 2}, /*accumulate=*/true);
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 7; ++j) {
        double want = 1.0;
        for (int64_t q = 0; q < 5; ++q) want += a[i * 5 + q] * b[q + j * 5];
        EXPECT_NEAR(c[i * 14 + 2 * j], want, 1e-12);
        EXPECT_EQ(c[i * 14 + 2 * j + 1], 1.0);  // untouched
      }
  }
  gemm::set_blas_int_limit_for_testing(0);
}
