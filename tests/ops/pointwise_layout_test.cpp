// tests/ops/pointwise_layout_test.cpp -- pointwise ops on broadcast, strided and large operands:
// the strided driver, the conversion buffers, the threaded split and the vector tails.
#include <cstring>

#include "tests/ops/pointwise_cases.h"

namespace kiln::test {
namespace {

struct BroadcastCase {
  Dims a, b, out;
};
const BroadcastCase kBroadcasts[] = {
    {{3, 1, 5}, {4, 5}, {3, 4, 5}}, {{}, {2, 3}, {2, 3}},  {{2, 3}, {}, {2, 3}},
    {{1, 6}, {5, 1}, {5, 6}},       {{5, 1}, {1}, {5, 1}}, {{2, 1, 3, 1}, {4, 1, 5}, {2, 4, 3, 5}},
    {{4, 1}, {4, 70}, {4, 70}},     {{0, 3}, {3}, {0, 3}},
};

class BinaryLayout : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryLayout, BroadcastsLikeNumPy) {
  const BinaryCase& c = GetParam();
  manual_seed(21);
  for (DType t : {f32, f16, i32}) {
    if (!accepts(c.id, t)) continue;  // the dtype sweep checks the error
    for (const BroadcastCase& s : kBroadcasts) {
      SCOPED_TRACE(dname(t) + " " + shape_str(s.a) + " with " + shape_str(s.b));
      Tensor a = values(s.a, t, c.lo, c.hi, c.whole), b = values(s.b, t, c.lo_b, c.hi_b, c.whole);
      std::vector<double> av = broadcast_values(a.to_vector<double>(), s.a, s.out);
      std::vector<double> bv = broadcast_values(b.to_vector<double>(), s.b, s.out);
      DType out = result_dtype(c.id, t);
      EXPECT_TRUE(all_close(c.fn(a, b), binary_ref(c, av, bv, out), s.out));
    }
  }
}

TEST_P(BinaryLayout, ReadsTransposedSlicedAndExpandedOperands) {
  const BinaryCase& c = GetParam();
  manual_seed(22);
  for (DType t : {f32, f64, f16, i64}) {
    if (!accepts(c.id, t)) continue;
    SCOPED_TRACE(dname(t));
    Tensor base_a = values({37, 12}, t, c.lo, c.hi, c.whole);
    Tensor base_b = values({24, 75}, t, c.lo_b, c.hi_b, c.whole);
    Tensor row_b = values({1, 37}, t, c.lo_b, c.hi_b, c.whole);
    std::vector<double> va = base_a.to_vector<double>(), vb = base_b.to_vector<double>(),
                        vr = row_b.to_vector<double>();
    Tensor a = base_a.t();                                    // [12,37], strides [1,12]
    Tensor b = base_b.slice(0, 0, 24, 2).slice(1, 1, 75, 2);  // [12,37], step 2 both ways
    Tensor r = row_b.expand({12, 37});                        // stride 0 rows
    DType out = result_dtype(c.id, t);
    EXPECT_TRUE(all_close(c.fn(a, b), binary_ref(c, view_values(a, va), view_values(b, vb), out), {12, 37}));
    EXPECT_TRUE(all_close(c.fn(b, r), binary_ref(c, view_values(b, vb), view_values(r, vr), out), {12, 37}));
    EXPECT_TRUE(all_close(c.fn(r, a), binary_ref(c, view_values(r, vr), view_values(a, va), out), {12, 37}));
  }
}

TEST_P(BinaryLayout, LargeOperandsUseEveryThreadAndTail) {
  const BinaryCase& c = GetParam();
  ThreadsGuard threads(4);
  manual_seed(23);
  const int64_t n = 100003;  // > the parallel grain, and not a multiple of any vector width
  for (DType t : {f32, f16, i32}) {
    if (!accepts(c.id, t)) continue;
    SCOPED_TRACE(dname(t));
    Tensor a = values({n}, t, c.lo, c.hi, c.whole), b = values({n}, t, c.lo_b, c.hi_b, c.whole);
    DType out = result_dtype(c.id, t);
    EXPECT_TRUE(all_close(c.fn(a, b), binary_ref(c, a.to_vector<double>(), b.to_vector<double>(), out), {n}));
    // Many rows of a broadcast row vector, split across threads by rows.
    Tensor m = values({331, 317}, t, c.lo, c.hi, c.whole), v = values({317}, t, c.lo_b, c.hi_b, c.whole);
    std::vector<double> vv = broadcast_values(v.to_vector<double>(), {317}, {331, 317});
    EXPECT_TRUE(all_close(c.fn(m, v), binary_ref(c, m.to_vector<double>(), vv, out), {331, 317}));
    // Large and transposed: every row is strided.
    Tensor big = values({263, 401}, t, c.lo, c.hi, c.whole);
    Tensor bt = big.t();
    std::vector<double> vt = view_values(bt, big.to_vector<double>());
    Tensor other = values({401, 263}, t, c.lo_b, c.hi_b, c.whole);
    EXPECT_TRUE(all_close(c.fn(bt, other), binary_ref(c, vt, other.to_vector<double>(), out), {401, 263}));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, BinaryLayout, ::testing::ValuesIn(binary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

class UnaryLayout : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryLayout, ReadsTransposedSlicedAndExpandedInputs) {
  const UnaryCase& c = GetParam();
  manual_seed(24);
  for (DType t : {f32, f64, f16, bf16, i32}) {
    if (!accepts(c.id, t)) continue;
    SCOPED_TRACE(dname(t));
    DType out = result_dtype(c.id, t);
    Tensor base = values({10, 37}, t, c.lo, c.hi);
    std::vector<double> v = base.to_vector<double>();
    Tensor cube = values({4, 5, 6}, t, c.lo, c.hi);
    std::vector<double> vc = cube.to_vector<double>();
    Tensor row = values({1, 37}, t, c.lo, c.hi);
    std::vector<double> vr = row.to_vector<double>();
    for (const Tensor& x : {base.t(), base.slice(0, 1, 10, 2), base.slice(1, 0, 37, 2), cube.permute({2, 0, 1}),
                            cube.slice(2, 5, 6).squeeze(2), base.select(1, 3)}) {
      SCOPED_TRACE(x.type().str());
      bool of_base = x.impl()->storage == base.impl()->storage;
      ASSERT_TRUE(of_base || x.impl()->storage == cube.impl()->storage) << "not a view";
      const std::vector<double>& src = of_base ? v : vc;
      EXPECT_TRUE(all_close(c.fn(x), unary_ref(c, view_values(x, src), out), x.shape()));
    }
    Tensor e = row.expand({9, 37});
    EXPECT_TRUE(all_close(c.fn(e), unary_ref(c, view_values(e, vr), out), {9, 37}));
  }
}

TEST_P(UnaryLayout, LargeInputsUseEveryThreadAndTail) {
  const UnaryCase& c = GetParam();
  ThreadsGuard threads(4);
  manual_seed(25);
  const int64_t n = 100003;
  for (DType t : {f32, f64, f16, i32}) {
    if (!accepts(c.id, t)) continue;
    SCOPED_TRACE(dname(t));
    DType out = result_dtype(c.id, t);
    Tensor x = values({n}, t, c.lo, c.hi);
    EXPECT_TRUE(all_close(c.fn(x), unary_ref(c, x.to_vector<double>(), out), {n}));
    Tensor m = values({401, 263}, t, c.lo, c.hi);
    Tensor mt = m.t();
    EXPECT_TRUE(all_close(c.fn(mt), unary_ref(c, view_values(mt, m.to_vector<double>()), out), {263, 401}));
  }
}

// As for unary ops below: a binary op's bits do not depend on its operands' layouts. Each of a
// transposed operand, a strided one, a broadcast row and a broadcast single element gives what
// their contiguous copies give, bit for bit.
TEST_P(BinaryLayout, BitsDoNotDependOnTheLayout) {
  const BinaryCase& c = GetParam();
  manual_seed(27);
  auto same_bits = [](const Tensor& x, const Tensor& y) {
    Tensor a = x.contiguous(), b = y.contiguous();
    if (!(a.type() == b.type())) return false;
    size_t bytes = static_cast<size_t>(a.numel() * dtype_size(a.dtype()));
    return std::memcmp(a.data_ptr(), b.data_ptr(), bytes) == 0;
  };
  for (DType t : {f32, f64, f16, i64}) {
    if (!accepts(c.id, t)) continue;
    SCOPED_TRACE(dname(t));
    for (Dims shape : {Dims{5, 7}, Dims{13, 9}, Dims{3, 37}}) {
      Tensor a = values({shape[1], shape[0]}, t, c.lo, c.hi, c.whole).t();  // transposed
      Tensor b = values({shape[0], 2 * shape[1]}, t, c.lo_b, c.hi_b, c.whole).slice(1, 0, 2 * shape[1], 2);
      Tensor row = values({1, shape[1]}, t, c.lo_b, c.hi_b, c.whole).expand(shape);
      Tensor one = values({1, 1}, t, c.lo_b, c.hi_b, c.whole).expand(shape);
      EXPECT_TRUE(same_bits(c.fn(a, b), c.fn(a.contiguous(), b.contiguous()))) << shape_str(shape);
      EXPECT_TRUE(same_bits(c.fn(b, a), c.fn(b.contiguous(), a.contiguous()))) << shape_str(shape);
      EXPECT_TRUE(same_bits(c.fn(a, row), c.fn(a.contiguous(), row.contiguous()))) << shape_str(shape);
      EXPECT_TRUE(same_bits(c.fn(row, a), c.fn(row.contiguous(), a.contiguous()))) << shape_str(shape);
      EXPECT_TRUE(same_bits(c.fn(a, one), c.fn(a.contiguous(), one.contiguous()))) << shape_str(shape);
      EXPECT_TRUE(same_bits(c.fn(one, b), c.fn(one.contiguous(), b.contiguous()))) << shape_str(shape);
    }
  }
}

// An element's bits do not depend on the layout it is read in: a transposed input (short rows,
// all in the vector tail) gives what its contiguous copy gives, bit for bit. (The jit relies on
// it: a trace drops copies that change only the layout.)
TEST_P(UnaryLayout, BitsDoNotDependOnTheLayout) {
  const UnaryCase& c = GetParam();
  manual_seed(26);
  for (DType t : {f32, f64, f16, i32}) {
    if (!accepts(c.id, t)) continue;
    SCOPED_TRACE(dname(t));
    for (Dims shape : {Dims{5, 7}, Dims{13, 9}, Dims{3, 37}}) {
      Tensor x = values(shape, t, c.lo, c.hi).t();
      Tensor a = c.fn(x).contiguous(), b = c.fn(x.contiguous());
      ASSERT_EQ(a.type().str(), b.type().str());
      size_t bytes = static_cast<size_t>(a.numel() * dtype_size(a.dtype()));
      EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), bytes), 0) << x.type().str() << "\n" << a << "\n" << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, UnaryLayout, ::testing::ValuesIn(unary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(WhereLayout, StridedAndLargeOperands) {
  ThreadsGuard threads(4);
  manual_seed(26);
  Tensor c = uniform({300, 401}, boolean, 0, 1), a = uniform({401, 300}, f32, -5, 5), b = uniform({1, 401}, f32, -5, 5);
  Tensor ct = c.t(), be = b.t().expand({401, 300});
  std::vector<double> cv = view_values(ct, c.to_vector<double>()), av = a.to_vector<double>(),
                      bv = view_values(be, b.to_vector<double>()), want(cv.size());
  for (size_t i = 0; i < cv.size(); ++i) want[i] = cv[i] != 0 ? av[i] : bv[i];
  EXPECT_TRUE(all_close(where(ct, a, be), want, {401, 300}));
}

TEST(ClampLayout, StridedAndBroadcastBounds) {
  manual_seed(27);
  Tensor x = uniform({20, 30}, f32, -10, 10), lo = uniform({30}, f32, -6, 0), hi = uniform({15, 1}, f32, 0, 6);
  Tensor xs = x.slice(0, 0, 20, 2).slice(1, 0, 30, 1);  // [10,30], rows step 2
  Tensor hs = hi.slice(0, 0, 15, 1).slice(0, 0, 10, 1);
  std::vector<double> xv = view_values(xs, x.to_vector<double>());
  std::vector<double> lv = broadcast_values(lo.to_vector<double>(), {30}, {10, 30});
  std::vector<double> hv = broadcast_values(view_values(hs, hi.to_vector<double>()), {10, 1}, {10, 30});
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = std::min(std::max(xv[i], lv[i]), hv[i]);
  EXPECT_TRUE(all_close(clamp(xs, lo, hs), want, {10, 30}));
}

}  // namespace
}  // namespace kiln::test
