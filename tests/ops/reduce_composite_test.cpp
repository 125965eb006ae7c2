// tests/ops/reduce_composite_test.cpp -- mean, var, std, logsumexp, softmax, log_softmax and
// layer_norm (composites of the primitives) against double references.
#include "tests/ops/reduce_reference.h"

namespace kiln::test {
namespace {

// Composites round every intermediate to the tensor's dtype, so f16 and bf16 results carry a
// few of their roundings, not one.
Tolerance composite_tolerance(DType t) {
  Tolerance tol = tolerance(t);
  if (t == f16 || t == bf16) tol.rtol *= 5;
  return tol;
}

const Dims kCompositeShape = {3, 4, 5};
const std::vector<DType> kDTypes = {f32, f64, f16, bf16, i32, i64, u8, boolean};

TEST(Mean, EveryAxisSubsetKeepdimAndDType) {
  manual_seed(61);
  for (DType t : kDTypes) {
    Tensor x = uniform(kCompositeShape, t, t == u8 ? 0 : -10, 10);
    std::vector<double> xv = x.to_vector<double>();
    for (const Dims& axes : rank3_axis_sets())
      for (bool keep : {false, true}) {
        SCOPED_TRACE(dname(t) + " axes " + shape_str(axes) + (keep ? " keepdim" : ""));
        Reduction red = reduction(kCompositeShape, axes, keep);
        Tensor y = mean(x, axes, keep);
        EXPECT_EQ(y.dtype(), to_float_dtype(t));
        std::vector<double> scale =
            reduce_ref(xv, red, [](const std::vector<double>& g) { return ref_abs_sum(g) / double(g.size()); });
        EXPECT_TRUE(all_close(y, reduce_ref(xv, red, ref_mean), red.out_shape, composite_tolerance(y.dtype()), scale));
      }
  }
}

TEST(VarStd, EveryAxisSubsetCorrectionAndDType) {
  manual_seed(62);
  for (DType t : {f32, f64, f16, bf16, i32, u8}) {
    Tensor x = uniform(kCompositeShape, t, t == u8 ? 0 : -10, 10);
    std::vector<double> xv = x.to_vector<double>();
    for (const Dims& axes : rank3_axis_sets())
      for (int64_t correction : {0, 1, 2}) {
        SCOPED_TRACE(dname(t) + " axes " + shape_str(axes) + " correction " + std::to_string(correction));
        bool keep = correction == 1;
        Reduction red = reduction(kCompositeShape, axes, keep);
        auto v = [&](const std::vector<double>& g) { return ref_var(g, correction); };
        Tensor y = var(x, axes, correction, keep);
        EXPECT_EQ(y.dtype(), to_float_dtype(t));
        Tolerance tol = composite_tolerance(y.dtype());
        EXPECT_TRUE(all_close(y, reduce_ref(xv, red, v), red.out_shape, tol));
        EXPECT_TRUE(all_close(kiln::std(x, axes, correction, keep),
                              map(reduce_ref(xv, red, v), [](double a) { return std::sqrt(a); }), red.out_shape, tol));
      }
  }
}

TEST(VarStd, LargeMeanAndTooFewElements) {
  manual_seed(63);
  Tensor x = uniform({8, 1000}, f32, 1000, 1001);  // a large mean: a one-pass formula cancels
  std::vector<double> xv = x.to_vector<double>();
  Reduction red = reduction({8, 1000}, {1}, false);
  EXPECT_TRUE(all_close(var(x, {1}), reduce_ref(xv, red, [](const auto& g) { return ref_var(g, 1); }), {8}));
  Tensor one = uniform({3, 1}, f32, -1, 1);  // n - correction = 0: 0/0 as in PyTorch
  Reduction r1 = reduction({3, 1}, {1}, false);
  EXPECT_TRUE(all_close(var(one, {1}),
                        reduce_ref(one.to_vector<double>(), r1, [](const auto& g) { return ref_var(g, 1); }), {3}));
}

TEST(LogSumExp, EveryAxisSubsetAndDType) {
  manual_seed(64);
  for (DType t : {f32, f64, f16, bf16, i32}) {
    Tensor x = uniform(kCompositeShape, t, -10, 10);
    std::vector<double> xv = x.to_vector<double>();
    for (const Dims& axes : rank3_axis_sets())
      for (bool keep : {false, true}) {
        SCOPED_TRACE(dname(t) + " axes " + shape_str(axes) + (keep ? " keepdim" : ""));
        Reduction red = reduction(kCompositeShape, axes, keep);
        Tensor y = logsumexp(x, axes, keep);
        EXPECT_EQ(y.dtype(), to_float_dtype(t));
        std::vector<double> scale = reduce_ref(xv, red, [](const auto& g) { return std::abs(ref_max(g)) + 1; });
        EXPECT_TRUE(
            all_close(y, reduce_ref(xv, red, ref_logsumexp), red.out_shape, composite_tolerance(y.dtype()), scale));
      }
  }
}

// Rows with huge values, -inf entries and only -inf entries.
std::vector<double> hard_rows() {
  return {1000,      1001,      999,       -1000, 0,        1,    2,  -INFINITY, 3,
          -INFINITY, -INFINITY, -INFINITY, -1e4,  -1e4 + 1, -1e4, 88, 89,        90};
}

TEST(LogSumExp, StaysFiniteForHugeAndInfiniteValues) {
  std::vector<double> v = hard_rows();
  for (DType t : {f32, f64}) {
    Tensor x = from_vector(v, {6, 3}).to(t);
    Reduction red = reduction({6, 3}, {1}, false);
    EXPECT_TRUE(all_close(logsumexp(x, {1}), reduce_ref(x.to_vector<double>(), red, ref_logsumexp), {6}));
  }
}

// softmax (log = false) or log_softmax of x along dim, in double.
std::vector<double> softmax_ref(const std::vector<double>& x, const Dims& shape, int64_t dim, bool log) {
  Reduction red = reduction(shape, {dim}, true);
  std::vector<double> out(x.size());
  for (const auto& group : red.groups) {
    std::vector<double> g;
    for (int64_t i : group) g.push_back(x[static_cast<size_t>(i)]);
    double lse = ref_logsumexp(g);
    for (int64_t i : group) out[size_t(i)] = log ? x[size_t(i)] - lse : std::exp(x[size_t(i)] - lse);
  }
  return out;
}

TEST(Softmax, EveryDimDTypeAndLayout) {
  manual_seed(65);
  for (DType t : {f32, f64, f16, bf16, i32}) {
    Tensor base = uniform({4, 3, 5}, t, -8, 8);
    for (const Tensor& x : {base.reshape(kCompositeShape), base.permute({1, 0, 2}), base.slice(2, 0, 5, 2)}) {
      std::vector<double> xv = view_values(x, base.to_vector<double>());
      for (int64_t d : {0, 1, 2, -1, -3}) {
        SCOPED_TRACE(dname(t) + " " + x.type().str() + " dim " + std::to_string(d));
        Tensor s = softmax(x, d), l = log_softmax(x, d);
        EXPECT_EQ(s.dtype(), to_float_dtype(t));
        Tolerance tol = composite_tolerance(s.dtype());
        EXPECT_TRUE(all_close(s, softmax_ref(xv, x.shape(), d, false), x.shape(), tol));
        std::vector<double> ones(xv.size(), 1.0);  // log_softmax's terms are O(1)
        EXPECT_TRUE(all_close(l, softmax_ref(xv, x.shape(), d, true), x.shape(), tol, ones));
      }
    }
  }
}

TEST(Softmax, HugeAndMaskedEntries) {
  std::vector<double> v = hard_rows();
  for (DType t : {f32, f64}) {
    Tensor x = from_vector(v, {6, 3}).to(t);
    std::vector<double> xv = x.to_vector<double>();
    EXPECT_TRUE(all_close(softmax(x, 1), softmax_ref(xv, {6, 3}, 1, false), {6, 3}));
    EXPECT_TRUE(all_close(log_softmax(x, 1), softmax_ref(xv, {6, 3}, 1, true), {6, 3}));
  }
}

// layer_norm over the trailing dims, with optional affine weight and bias.
std::vector<double> layer_norm_ref(const std::vector<double>& x, const Dims& shape, size_t k,
                                   const std::vector<double>& w, const std::vector<double>& b, double eps) {
  Dims axes;
  for (size_t i = shape.size() - k; i < shape.size(); ++i) axes.push_back(int64_t(i));
  Reduction red = reduction(shape, axes, true);
  std::vector<double> out(x.size());
  for (const auto& group : red.groups) {
    std::vector<double> g;
    for (int64_t i : group) g.push_back(x[size_t(i)]);
    double m = ref_mean(g), inv = 1 / std::sqrt(ref_var(g, 0) + eps);
    for (size_t j = 0; j < group.size(); ++j) {
      double y = (g[j] - m) * inv;
      if (!w.empty()) y *= w[j];
      if (!b.empty()) y += b[j];
      out[size_t(group[j])] = y;
    }
  }
  return out;
}

TEST(LayerNorm, TrailingDimsAffineAndDType) {
  manual_seed(66);
  for (DType t : {f32, f64, f16, bf16}) {
    Tensor base = uniform({5, 3, 4}, t, -3, 7);
    for (const Tensor& x : {base.reshape(kCompositeShape), base.permute({1, 2, 0})}) {
      std::vector<double> xv = view_values(x, base.to_vector<double>());
      for (size_t k : {1, 2}) {
        Dims norm(std::span<const int64_t>(x.shape().begin() + (3 - k), k));
        Tensor w = uniform(norm, t, 0.5, 2), b = uniform(norm, t, -1, 1);
        std::vector<double> wv = w.to_vector<double>(), bv = b.to_vector<double>();
        for (double eps : {1e-5, 1e-2}) {
          SCOPED_TRACE(dname(t) + " " + x.type().str() + " over " + shape_str(norm));
          Tolerance tol = composite_tolerance(t);
          std::vector<double> ones(xv.size(), 1.0);  // outputs are O(1)
          EXPECT_TRUE(all_close(layer_norm(x, norm, {}, {}, eps), layer_norm_ref(xv, x.shape(), k, {}, {}, eps),
                                x.shape(), tol, ones));
          EXPECT_TRUE(all_close(layer_norm(x, norm, w, b, eps), layer_norm_ref(xv, x.shape(), k, wv, bv, eps),
                                x.shape(), tol, ones));
          EXPECT_TRUE(all_close(layer_norm(x, norm, w, {}, eps), layer_norm_ref(xv, x.shape(), k, wv, {}, eps),
                                x.shape(), tol, ones));
        }
      }
    }
  }
}

TEST(CompositeErrors, NameTheOpTheyWereCalledAs) {
  Tensor x = zeros({3, 4, 5});
  EXPECT_TRUE(throws_error([&] { return mean(x, {3}); }, {"mean", "dim 3"}));
  EXPECT_TRUE(throws_error([&] { return var(x, {0, -3}); }, {"var", "more than once"}));
  EXPECT_TRUE(throws_error([&] { return kiln::std(x, {7}); }, {"std", "dim 7"}));
  EXPECT_TRUE(throws_error([&] { return logsumexp(x, {-4}); }, {"logsumexp", "dim -4"}));
  EXPECT_TRUE(throws_error([&] { return softmax(x, 3); }, {"softmax", "dim 3"}));
  EXPECT_TRUE(throws_error([&] { return log_softmax(x, -4); }, {"log_softmax", "dim -4"}));
  EXPECT_TRUE(throws_error([&] { return layer_norm(x, {4}); }, {"layer_norm", "[4]", "f32[3,4,5]"}));
  EXPECT_TRUE(throws_error([&] { return layer_norm(x, {1, 3, 4, 5}); }, {"layer_norm", "[1,3,4,5]"}));
  EXPECT_TRUE(throws_error([&] { return layer_norm(x, {5}, zeros({4})); }, {"layer_norm", "[5]", "f32[4]"}));
  Tensor undefined;
  EXPECT_TRUE(throws_error([&] { return mean(undefined); }, {"mean", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return var(undefined); }, {"var", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return kiln::std(undefined); }, {"std", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return logsumexp(undefined, {0}); }, {"logsumexp", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return softmax(undefined, 0); }, {"softmax", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return log_softmax(undefined, 0); }, {"log_softmax", "undefined"}));
  EXPECT_TRUE(throws_error([&] { return layer_norm(undefined, {4}); }, {"layer_norm", "undefined"}));
}

}  // namespace
}  // namespace kiln::test
