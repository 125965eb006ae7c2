// tests/ops/reduce_test.cpp -- sum, prod, amax, amin, max, min, argmax, argmin against double
// references: every axis subset, keepdim, every dtype, strided inputs, NaN, and every loop path.
#include <cstring>

#include "tests/ops/reduce_reference.h"

namespace kiln::test {
namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (!(a.type() == b.type())) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(a.numel() * dtype_size(a.dtype()))) == 0;
}

struct ReduceCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Dims&, bool);
  double (*ref)(const std::vector<double>&);
  bool widens;  // integers and bool reduce into i64 (sum, prod); else the dtype is kept
};

const ReduceCase kReduceCases[] = {
    {"sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }, ref_sum, true},
    {"prod", [](const Tensor& x, const Dims& d, bool k) { return prod(x, d, k); }, ref_prod, true},
    {"amax", [](const Tensor& x, const Dims& d, bool k) { return amax(x, d, k); }, ref_max, false},
    {"amin", [](const Tensor& x, const Dims& d, bool k) { return amin(x, d, k); }, ref_min, false},
};

void PrintTo(const ReduceCase& c, std::ostream* os) { *os << c.name; }

// Inputs: prod gets factors near 1 so its products stay in range: integers in [1, 2] for up to
// 60 factors (2^60 fits i64), else +-1.
// `factors`: how many elements one output may combine (default: all of them).
Tensor reduce_input(const ReduceCase& c, const Dims& shape, DType t, int64_t factors = -1) {
  bool is_prod = std::string(c.name) == "prod";
  if (factors < 0) factors = shape.product();
  if (is_prod && is_integral(t) && factors > 60) return uniform(shape, t, 0, 1) * 2 - 1;
  if (!is_float(t)) return uniform(shape, t, is_prod ? 1 : (t == u8 ? 0 : -20), is_prod ? 2 : 20);
  return is_prod ? uniform(shape, t, 0.5, 1.5) : uniform(shape, t, -10, 10);
}

// sum's error is relative to sum |x| (cancellation); prod's grows with the number of factors.
std::vector<double> error_scale(const ReduceCase& c, const std::vector<double>& x, const Reduction& red,
                                const std::vector<double>& want) {
  std::string name = c.name;
  if (name == "sum") return reduce_ref(x, red, ref_abs_sum);
  std::vector<double> s(want.size(), 0.0);
  if (name == "prod")
    for (size_t i = 0; i < s.size(); ++i) s[i] = std::abs(want[i]) * std::sqrt(double(red.groups[i].size()));
  return s;
}

::testing::AssertionResult check(const ReduceCase& c, const Tensor& got, const std::vector<double>& x,
                                 const Reduction& red, DType in) {
  DType out = c.widens && !is_float(in) ? i64 : in;
  if (got.dtype() != out) return ::testing::AssertionFailure() << got.type() << ", expected dtype " << dtype_name(out);
  std::vector<double> want = reduce_ref(x, red, c.ref);
  for (double& w : want) w = stored_as(out, w);
  Tolerance tol = tolerance(out);
  if (std::string(c.name) == "amax" || std::string(c.name) == "amin") tol = {0, 0};  // picks one
  return all_close(got, want, red.out_shape, tol, error_scale(c, x, red, want));
}

class Reduce : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(Reduce, EveryAxisSubsetKeepdimAndDType) {
  const ReduceCase& c = GetParam();
  manual_seed(51);
  const Dims shape = {3, 4, 5};
  for (DType t : kAllDTypes) {
    Tensor x = reduce_input(c, shape, t);
    std::vector<double> xv = x.to_vector<double>();
    for (const Dims& axes : rank3_axis_sets())
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(dname(t) + " axes " + shape_str(axes) + (keepdim ? " keepdim" : ""));
        EXPECT_TRUE(check(c, c.fn(x, axes, keepdim), xv, reduction(shape, axes, keepdim), t));
      }
  }
}

TEST_P(Reduce, PermutedSlicedAndExpandedInputs) {
  const ReduceCase& c = GetParam();
  manual_seed(52);
  for (DType t : {f32, f64, f16, i32}) {
    Tensor base = reduce_input(c, {6, 5, 8}, t), row = reduce_input(c, {1, 5, 8}, t, 160);
    std::vector<double> bv = base.to_vector<double>(), rv = row.to_vector<double>();
    const std::pair<Tensor, const std::vector<double>*> inputs[] = {
        {base.permute({2, 0, 1}), &bv},  // [8,6,5]
        {base.slice(1, 0, 5, 2), &bv},   // [6,3,8]
        {base.slice(0, 1, 6, 2).transpose(1, 2), &bv},
        {row.expand({4, 5, 8}), &rv},  // stride 0 on the leading dim
    };
    for (const auto& [x, src] : inputs) {
      std::vector<double> xv = view_values(x, *src);
      for (const Dims& axes : rank3_axis_sets()) {
        SCOPED_TRACE(dname(t) + " " + x.type().str() + " axes " + shape_str(axes));
        EXPECT_TRUE(check(c, c.fn(x, axes, false), xv, reduction(x.shape(), axes, false), t));
      }
    }
  }
}

// Reductions over the middle axis (vectorized along the kept inner axis), the leading axis
// (column blocks), the last axis (rows), two split axes (gathered first) and all axes.
TEST_P(Reduce, EveryLoopPathOnLargeInputs) {
  const ReduceCase& c = GetParam();
  ThreadsGuard threads(4);
  manual_seed(53);
  const bool is_prod = std::string(c.name) == "prod";
  struct Case {
    Dims shape;
    Dims axes;
  };
  const Case cases[] = {{{64, 300, 70}, {1}},
                        {{64, 300, 70}, {0}},
                        {{64, 300, 70}, {2}},
                        {{64, 300, 70}, {0, 2}},
                        {{64, 300, 70}, {0, 1}},
                        {{37, 1031}, {0}},
                        {{1031, 37}, {1}},
                        {{64, 300, 70}, {}},
                        // Few outputs, long reductions: cut into runs reduced on every thread.
                        {{150000, 5}, {0}},
                        {{2, 70000, 3}, {1}},
                        {{3, 100000}, {1}},
                        {{5, 3, 40000}, {0, 2}}};
  for (DType t : {f32, i64}) {
    for (const Case& k : cases) {
      if (is_prod && k.axes.empty()) continue;  // a product of a million factors has no scale
      SCOPED_TRACE(dname(t) + " " + shape_str(k.shape) + " axes " + shape_str(k.axes));
      // Factors within 1 +- 0.01 keep products of thousands of them in range.
      Tensor x = is_prod && is_float(t) ? uniform(k.shape, t, 0.99, 1.01) : reduce_input(c, k.shape, t);
      EXPECT_TRUE(check(c, c.fn(x, k.axes, false), x.to_vector<double>(), reduction(k.shape, k.axes, false), t));
    }
  }
}

// Long reductions are cut into runs by their shape alone, so any thread count gives the same
// bits: all axes, rows, narrow columns, and split axes.
TEST_P(Reduce, SameBitsOnAnyThreadCount) {
  const ReduceCase& c = GetParam();
  manual_seed(54);
  const bool is_prod = std::string(c.name) == "prod";
  const std::pair<Dims, Dims> cases[] = {{{1 << 20}, {}},       {{3, 300000}, {1}},  {{300000, 3}, {0}},
                                         {{2, 200000, 3}, {1}}, {{40, 100, 70}, {}}, {{7, 64, 3000}, {0, 2}}};
  for (DType t : {f32, f64, i64}) {
    for (const auto& [shape, axes] : cases) {
      SCOPED_TRACE(dname(t) + " " + shape_str(shape) + " axes " + shape_str(axes));
      Tensor x = is_prod && is_float(t) ? uniform(shape, t, 0.9999, 1.0001) : reduce_input(c, shape, t);
      std::vector<Tensor> got;
      for (int threads : {1, 2, 3}) {
        ThreadsGuard guard(threads);
        got.push_back(c.fn(x, axes, false));
      }
      for (size_t i = 1; i < got.size(); ++i) EXPECT_TRUE(bitwise_equal(got[i], got[0])) << i + 1 << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, Reduce, ::testing::ValuesIn(kReduceCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Reduce, LargeFloatSumStaysAccurate) {
  const int64_t n = int64_t{1} << 22;  // 4M elements of 0.1f
  Tensor x = full({n}, 0.1f);
  double want = double(n) * double(0.1f);
  double got = sum(x).item<double>();
  EXPECT_LT(std::abs(got - want) / want, 1e-6) << got << " vs " << want;
  Tensor rows = x.reshape({4, n / 4});
  for (double g : sum(rows, {1}).to_vector<double>()) EXPECT_LT(std::abs(g - want / 4) / (want / 4), 1e-6);
  EXPECT_LT(std::abs(mean(x).item<double>() - double(0.1f)) / 0.1, 1e-6);
  // The same over a leading axis (column path) and a middle axis.
  for (const auto& [shape, axis] : {std::pair<Dims, int64_t>{{n / 4, 4}, 0}, {{4, n / 16, 4}, 1}}) {
    SCOPED_TRACE(shape_str(shape));
    double w = double(n / 16 * (shape.size() == 2 ? 4 : 1)) * double(0.1f);
    for (double g : sum(x.reshape(shape), {axis}).to_vector<double>()) EXPECT_LT(std::abs(g - w) / w, 1e-6) << g;
  }
}

TEST(Reduce, MaxMinOverADimAndOverAll) {
  manual_seed(54);
  Tensor x = uniform({3, 4, 5}, i32, -50, 50);
  std::vector<double> xv = x.to_vector<double>();
  for (int64_t d : {0, 1, 2, -1})
    for (bool keep : {false, true}) {
      Reduction red = reduction({3, 4, 5}, {d}, keep);
      EXPECT_EQ(max(x, d, keep).dtype(), i32);
      EXPECT_TRUE(all_close(max(x, d, keep), reduce_ref(xv, red, ref_max), red.out_shape));
      EXPECT_TRUE(all_close(min(x, d, keep), reduce_ref(xv, red, ref_min), red.out_shape));
    }
  Reduction all = reduction({3, 4, 5}, {}, false);
  EXPECT_TRUE(all_close(max(x), reduce_ref(xv, all, ref_max), {}));
  EXPECT_TRUE(all_close(min(x), reduce_ref(xv, all, ref_min), {}));
  EXPECT_TRUE(all_close(x.max(), reduce_ref(xv, all, ref_max), {}));
}

TEST(Reduce, ZeroDimAndEmptyInputs) {
  Tensor s = scalar_tensor(2.5);
  std::vector<double> sv = s.to_vector<double>();
  Reduction one = reduction({}, {}, false);
  for (const Dims& axes : {Dims{}, Dims{0}, Dims{-1}}) {
    EXPECT_TRUE(all_close(sum(s, axes), reduce_ref(sv, one, ref_sum), {}));
    EXPECT_TRUE(all_close(amax(s, axes), reduce_ref(sv, one, ref_max), {}));
  }
  EXPECT_TRUE(all_close(argmax(s), {double(ref_arg(sv, true))}, {}));
  Tensor e = zeros({0, 3});
  Reduction red = reduction({0, 3}, {0}, false);
  EXPECT_TRUE(all_close(sum(e, {0}), reduce_ref({}, red, ref_sum), {3}));
  EXPECT_TRUE(all_close(prod(e, {0}), reduce_ref({}, red, ref_prod), {3}));
  EXPECT_TRUE(all_close(amax(e, {1}), {}, {0}));
}

// The index (i64) along each output's reduced positions of the first extreme element.
std::vector<double> arg_ref(const std::vector<double>& x, const Reduction& red, bool largest) {
  std::vector<double> out;
  for (size_t o = 0; o < red.groups.size(); ++o) {
    std::vector<double> g;
    for (int64_t i : red.groups[o]) g.push_back(x[static_cast<size_t>(i)]);
    out.push_back(double(red.positions[o][ref_arg(g, largest)]));
  }
  return out;
}

TEST(ArgReduce, FirstExtremeAlongEveryDimInEveryDType) {
  manual_seed(55);
  const Dims shape = {3, 4, 5};
  for (DType t : kAllDTypes) {
    Tensor x = uniform(shape, t, t == u8 ? 0 : -3, 3, /*whole=*/true);  // many ties
    std::vector<double> xv = x.to_vector<double>();
    for (int64_t d : {0, 1, 2, -1, -3})
      for (bool keep : {false, true}) {
        SCOPED_TRACE(dname(t) + " dim " + std::to_string(d) + (keep ? " keepdim" : ""));
        Reduction red = reduction(shape, {d}, keep);
        Tensor a = argmax(x, d, keep), b = argmin(x, d, keep);
        EXPECT_EQ(a.dtype(), i64);
        EXPECT_TRUE(all_close(a, arg_ref(xv, red, true), red.out_shape));
        EXPECT_TRUE(all_close(b, arg_ref(xv, red, false), red.out_shape));
      }
    Reduction flat = reduction(shape, {}, false);  // no dim: the flattened index
    EXPECT_TRUE(all_close(argmax(x), arg_ref(xv, flat, true), {}));
    EXPECT_TRUE(all_close(argmin(x), arg_ref(xv, flat, false), {}));
    EXPECT_TRUE(all_close(x.argmax(1), arg_ref(xv, reduction(shape, {1}, false), true), {3, 5}));
  }
}

TEST(ArgReduce, StridedInputs) {
  manual_seed(56);
  Tensor base = uniform({6, 7, 8}, f32, -3, 3, true);
  std::vector<double> bv = base.to_vector<double>();
  for (const Tensor& x : {base.permute({2, 0, 1}), base.slice(2, 1, 8, 3), base.transpose(0, 1)}) {
    std::vector<double> xv = view_values(x, bv);
    for (int64_t d : {0, 1, 2}) {
      SCOPED_TRACE(x.type().str() + " dim " + std::to_string(d));
      Reduction red = reduction(x.shape(), {d}, false);
      EXPECT_TRUE(all_close(argmax(x, d), arg_ref(xv, red, true), red.out_shape));
      EXPECT_TRUE(all_close(argmin(x, d), arg_ref(xv, red, false), red.out_shape));
    }
    EXPECT_TRUE(all_close(argmax(x), arg_ref(xv, reduction(x.shape(), {}, false), true), {}));
  }
}

// NaN wins max and min and its first position wins argmax and argmin, as in PyTorch, on
// every loop path (rows, column blocks, gathered axes).
TEST(ReduceNan, PropagatesThroughEveryPath) {
  manual_seed(57);
  const Dims shape = {6, 40, 37};
  std::vector<double> v = uniform(shape, f64, -5, 5).to_vector<double>();
  for (size_t i = 0; i < 24; ++i) v[(i * 9973 + 17) % v.size()] = NAN;
  for (DType t : kFloatDTypes) {
    Tensor x = from_vector(v, shape).to(t);
    std::vector<double> xv = x.to_vector<double>();
    for (const Dims& axes : {Dims{2}, Dims{0}, Dims{1}, Dims{0, 2}, Dims{}}) {
      SCOPED_TRACE(dname(t) + " axes " + shape_str(axes));
      Reduction red = reduction(shape, axes, false);
      EXPECT_TRUE(all_close(amax(x, axes), reduce_ref(xv, red, ref_max), red.out_shape, {0, 0}));
      EXPECT_TRUE(all_close(amin(x, axes), reduce_ref(xv, red, ref_min), red.out_shape, {0, 0}));
      EXPECT_TRUE(all_close(sum(x, axes), reduce_ref(xv, red, ref_sum), red.out_shape, tolerance(t),
                            reduce_ref(xv, red, ref_abs_sum)));
      if (axes.size() != 1) continue;
      EXPECT_TRUE(all_close(argmax(x, axes[0]), arg_ref(xv, red, true), red.out_shape));
      EXPECT_TRUE(all_close(argmin(x, axes[0]), arg_ref(xv, red, false), red.out_shape));
    }
    Reduction flat = reduction(shape, {}, false);
    EXPECT_TRUE(all_close(argmax(x), arg_ref(xv, flat, true), {}));
    EXPECT_TRUE(all_close(max(x), reduce_ref(xv, flat, ref_max), {}, {0, 0}));
  }
}

TEST(ReduceErrors, NameTheOpTheDimAndTheType) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_TRUE(throws_error([&] { return sum(x, {3}); }, {"sum", "dim 3", "rank 3"}));
  EXPECT_TRUE(throws_error([&] { return prod(x, {-4}); }, {"prod", "dim -4", "rank 3"}));
  EXPECT_TRUE(throws_error([&] { return amax(x, {0, 3}); }, {"max", "dim 3"}));
  EXPECT_TRUE(throws_error([&] { return argmax(x, 3); }, {"argmax", "dim 3"}));
  EXPECT_TRUE(throws_error([&] { return argmin(x, -4); }, {"argmin", "dim -4"}));
  EXPECT_TRUE(throws_error([&] { return sum(x, {1, -2}); }, {"sum", "-2", "more than once"}));
  EXPECT_TRUE(throws_error([&] { return amin(x, {0, 0}); }, {"min", "0", "more than once"}));
  Tensor e = zeros({0, 3});
  EXPECT_TRUE(throws_error([&] { return amax(e, {0}); }, {"max", "size 0", "f32[0,3]"}));
  EXPECT_TRUE(throws_error([&] { return max(e); }, {"max", "size 0", "f32[0,3]"}));
  EXPECT_TRUE(throws_error([&] { return min(e, 0); }, {"min", "size 0", "f32[0,3]"}));
  EXPECT_TRUE(throws_error([&] { return argmax(e, 0); }, {"argmax", "size 0", "f32[0,3]"}));
  EXPECT_TRUE(throws_error([&] { return argmin(zeros({0})); }, {"argmin", "size 0", "f32[0]"}));
  EXPECT_TRUE(throws_error([&] { return sum(Tensor()); }, {"sum", "undefined"}));
}

}  // namespace
}  // namespace kiln::test
