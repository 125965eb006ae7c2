// tests/nn/loss_test.cpp -- losses against double-precision references computed here, their
// gradients, extreme inputs and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

// log-softmax of row r of a [rows, C] row-major array, in double.
std::vector<double> log_softmax_row(const std::vector<double>& x, int r, int C) {
  double m = -INFINITY, s = 0;
  for (int c = 0; c < C; ++c) m = std::max(m, x[r * C + c]);
  for (int c = 0; c < C; ++c) s += std::exp(x[r * C + c] - m);
  std::vector<double> out;
  for (int c = 0; c < C; ++c) out.push_back(x[r * C + c] - m - std::log(s));
  return out;
}

// Cross-entropy per row with label smoothing s; rows whose target is `ignore` give NaN.
std::vector<double> ce_rows(const std::vector<double>& x, const std::vector<int64_t>& t, int C, double s = 0,
                            int64_t ignore = -100) {
  std::vector<double> out;
  for (size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore) {
      out.push_back(NAN);
      continue;
    }
    std::vector<double> lp = log_softmax_row(x, static_cast<int>(r), C);
    double smooth = 0;
    for (double v : lp) smooth -= v / C;
    out.push_back((1 - s) * -lp[t[r]] + s * smooth);
  }
  return out;
}

double mean_of_counted(const std::vector<double>& v) {
  double s = 0;
  int n = 0;
  for (double x : v)
    if (!std::isnan(x)) s += x, ++n;
  return s / n;
}

double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

}  // namespace

TEST(Loss, MseMatchesTheReferenceForEachReduction) {
  manual_seed(20);
  Tensor p = randn({3, 4}), t = randn({3, 4});
  std::vector<double> pv = p.to_vector<double>(), tv = t.to_vector<double>(), sq;
  double sum = 0;
  for (size_t i = 0; i < pv.size(); ++i) sq.push_back((pv[i] - tv[i]) * (pv[i] - tv[i])), sum += sq.back();
  expect_close(mse_loss(p, t), {sum / 12}, 1e-6, 1e-6);
  expect_close(mse_loss(p, t, Reduction::Sum), {sum}, 1e-5, 1e-6);
  Tensor none = mse_loss(p, t, Reduction::None);
  EXPECT_EQ(none.shape(), (Dims{3, 4}));
  expect_close(none, sq, 1e-6, 1e-6);
  expect_error([&] { mse_loss(p, randn({4, 3})); }, {"mse_loss", "f32[3,4]", "f32[4,3]"});
}

TEST(Loss, MseGradientIsTwiceTheDifferenceOverN) {
  Tensor p = from_vector<double>({1, 2, 3, 4}).requires_grad_();
  Tensor t = from_vector<double>({0, 2, 5, 3});
  mse_loss(p, t).backward();
  expect_close(p.grad(), {2 * 1 / 4.0, 0, 2 * -2 / 4.0, 2 * 1 / 4.0}, 1e-15);
}

TEST(Loss, NllPicksTheTargetLogProbability) {
  std::vector<double> lp{-0.1, -2, -3, -1.5, -0.5, -2.5, -4, -0.2, -1, -0.7, -0.9, -1.1};
  Tensor logp = from_vector(lp, {4, 3});
  Tensor t = from_vector<int64_t>({0, 1, 2, 1});
  expect_close(nll_loss(logp, t), {(0.1 + 0.5 + 1 + 0.9) / 4}, 1e-15);
  expect_close(nll_loss(logp, t, Reduction::Sum), {0.1 + 0.5 + 1 + 0.9}, 1e-15);
  expect_close(nll_loss(logp, t, Reduction::None), {0.1, 0.5, 1, 0.9}, 1e-15);
  // ignore_index: dropped from the sum and from the count.
  Tensor ti = from_vector<int64_t>({0, -100, 2, 1});
  expect_close(nll_loss(logp, ti), {(0.1 + 1 + 0.9) / 3}, 1e-15);
  expect_close(nll_loss(logp, ti, Reduction::None), {0.1, 0, 1, 0.9}, 1e-15);
  Tensor t2 = from_vector<int32_t>({2, 2, 2, 0});  // ignore a real class; i32 targets work too
  expect_close(nll_loss(logp, t2, Reduction::Mean, 2), {0.7}, 1e-15);
}

TEST(Loss, CrossEntropyMatchesTheReference) {
  manual_seed(21);
  const int N = 6, C = 5;
  Tensor x = randn({N, C}, f64) * 3.0;
  std::vector<double> xv = x.to_vector<double>();
  std::vector<int64_t> tv{0, 4, 2, 2, 1, 3};
  Tensor t = from_vector(tv);
  std::vector<double> rows = ce_rows(xv, tv, C);
  expect_close(cross_entropy(x, t), {mean_of_counted(rows)}, 1e-12);
  expect_close(cross_entropy(x, t, Reduction::None), rows, 1e-12);
  double total = 0;
  for (double r : rows) total += r;
  expect_close(cross_entropy(x, t, Reduction::Sum), {total}, 1e-12);
  // f32 logits give the same numbers to f32 precision.
  expect_close(cross_entropy(x.to(f32), t), {mean_of_counted(rows)}, 1e-5, 1e-5);
}

TEST(Loss, CrossEntropyWithLabelSmoothingAndIgnoreIndex) {
  manual_seed(22);
  const int N = 5, C = 4;
  Tensor x = randn({N, C}, f64) * 2.0;
  std::vector<double> xv = x.to_vector<double>();
  std::vector<int64_t> tv{1, 3, -100, 0, 3};
  Tensor t = from_vector(tv);
  for (double s : {0.0, 0.1, 0.35, 1.0}) {
    std::vector<double> rows = ce_rows(xv, tv, C, s);
    expect_close(cross_entropy(x, t, Reduction::Mean, s), {mean_of_counted(rows)}, 1e-12);
    std::vector<double> none = rows;
    none[2] = 0;
    expect_close(cross_entropy(x, t, Reduction::None, s), none, 1e-12);
    double total = 0;
    for (double r : none) total += r;
    expect_close(cross_entropy(x, t, Reduction::Sum, s), {total}, 1e-12);
  }
  std::vector<int64_t> tv2{1, 3, 2, 0, 3};  // ignore a real class
  std::vector<double> rows = ce_rows(xv, tv2, C, 0.2, 3);
  expect_close(cross_entropy(x, from_vector(tv2), Reduction::Mean, 0.2, 3), {mean_of_counted(rows)}, 1e-12);
  expect_error([&] { cross_entropy(x, t, Reduction::Mean, 1.5); }, {"cross_entropy", "label_smoothing", "1.5"});
}

TEST(Loss, CrossEntropyOnExtraDims) {
  manual_seed(23);
  const int N = 2, C = 3, D1 = 4, D2 = 2;
  Tensor x = randn({N, C, D1, D2}, f64);
  Tensor t = randint(0, C, {N, D1, D2});
  std::vector<int64_t> tv = t.to_vector<int64_t>();
  tv[3] = -100;
  t = from_vector(tv, {N, D1, D2});
  std::vector<double> xv = x.to_vector<double>();
  // Move classes last by hand: row (n, d1, d2) holds x[n, :, d1, d2].
  std::vector<double> rowsx;
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < D1 * D2; ++i)
      for (int c = 0; c < C; ++c) rowsx.push_back(xv[(n * C + c) * D1 * D2 + i]);
  for (double s : {0.0, 0.25}) {
    std::vector<double> rows = ce_rows(rowsx, tv, C, s);
    expect_close(cross_entropy(x, t, Reduction::Mean, s), {mean_of_counted(rows)}, 1e-12);
    Tensor none = cross_entropy(x, t, Reduction::None, s);
    EXPECT_EQ(none.shape(), (Dims{N, D1, D2}));
    rows[3] = 0;
    expect_close(none, rows, 1e-12);
  }
  // [N, C, d] too, through nll_loss on log-probabilities.
  Tensor x3 = x.reshape({N, C, D1 * D2});
  Tensor t3 = t.reshape({N, D1 * D2});
  expect_close(nll_loss(log_softmax(x3, 1), t3), {mean_of_counted(ce_rows(rowsx, tv, C))}, 1e-12);
}

TEST(Loss, CrossEntropyGradientIsSoftmaxMinusOneHotOverN) {
  manual_seed(24);
  const int N = 4, C = 3;
  Tensor x = (randn({N, C}, f64) * 2.0).requires_grad_();
  std::vector<int64_t> tv{2, 0, 1, 2};
  for (double s : {0.0, 0.3}) {
    x.zero_grad();
    cross_entropy(x, from_vector(tv), Reduction::Mean, s).backward();
    std::vector<double> xv = x.to_vector<double>(), want;
    for (int r = 0; r < N; ++r) {
      std::vector<double> lp = log_softmax_row(xv, r, C);
      for (int c = 0; c < C; ++c) {
        double q = (1 - s) * (c == tv[r]) + s / C;  // the target distribution
        want.push_back((std::exp(lp[c]) - q) / N);
      }
    }
    expect_close(x.grad(), want, 1e-12);
  }
  // Ignored rows get no gradient; the mean counts only the others.
  x.zero_grad();
  cross_entropy(x, from_vector<int64_t>({2, -100, -100, 2})).backward();
  std::vector<double> xv = x.to_vector<double>(), g = x.grad().to_vector<double>();
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(g[1 * C + c], 0);
    EXPECT_NEAR(g[0 * C + c], (std::exp(log_softmax_row(xv, 0, C)[c]) - (c == 2)) / 2, 1e-12);
  }
}

TEST(Loss, ClassificationLossesRejectBadTargets) {
  Tensor x = randn({4, 3});
  expect_error(
      [&] {
        cross_entropy(x, from_vector<float>({0, 1, 2, 0}));
      },
      {"cross_entropy", "integer class indices", "f32[4]"});
  expect_error(
      [&] {
        cross_entropy(x, from_vector<int64_t>({0, 1, 2}));
      },
      {"cross_entropy", "target i64[3] does not match input f32[4,3]", "expected [4]"});
  expect_error(
      [&] {
        cross_entropy(x, from_vector<int64_t>({0, 1, 2, 0}, {4, 1}));
      },
      {"cross_entropy", "does not match"});
  expect_error([&] { cross_entropy(randn({3}), from_vector<int64_t>({0})); },
               {"cross_entropy", "input must be [N, C]"});
  expect_error([&] { nll_loss(x, from_vector<bool>({true, false, true, false})); }, {"nll_loss", "integer"});
  expect_error([&] { nll_loss(x, from_vector<int64_t>({0, 1, 3, 0})); }, {"out of range"});  // class 3 of 3
  expect_error([&] { nll_loss(x, from_vector<int64_t>({0, -1, 2, 0})); }, {"out of range"});
  expect_error([&] { cross_entropy(x, from_vector<int64_t>({0, -2, 2, 0}), Reduction::Sum, 0.1); }, {"out of range"});
  Tensor undefined;
  expect_error([&] { nll_loss(x, undefined); }, {"nll_loss", "undefined"});
}

TEST(Loss, BceWithLogitsMatchesTheReference) {
  manual_seed(25);
  Tensor x = randn({3, 4}, f64) * 4.0;
  Tensor y = rand({3, 4}, f64);  // soft targets are allowed
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>(), ref;
  double total = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    // -[y log s(x) + (1 - y) log(1 - s(x))], with log s(x) = -softplus(-x)
    ref.push_back(yv[i] * softplus(-xv[i]) + (1 - yv[i]) * softplus(xv[i]));
    total += ref.back();
  }
  expect_close(binary_cross_entropy_with_logits(x, y, Reduction::None), ref, 1e-12, 1e-12);
  expect_close(binary_cross_entropy_with_logits(x, y), {total / 12}, 1e-12, 1e-12);
  expect_close(binary_cross_entropy_with_logits(x, y, Reduction::Sum), {total}, 1e-12, 1e-12);
  expect_error(
      [&] {
        binary_cross_entropy_with_logits(x, y.reshape({4, 3}));
      },
      {"binary_cross_entropy_with_logits", "f64[3,4]", "f64[4,3]"});
}

TEST(Loss, BceWithLogitsPosWeightScalesThePositiveTerm) {
  manual_seed(26);
  Tensor x = randn({5, 3}, f64) * 3.0;
  Tensor y = bernoulli({5, 3}, 0.5, f64);
  std::vector<double> w{0.5, 2, 7};
  Tensor pw = from_vector(w);
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>(), ref;
  for (size_t i = 0; i < xv.size(); ++i)
    ref.push_back(w[i % 3] * yv[i] * softplus(-xv[i]) + (1 - yv[i]) * softplus(xv[i]));
  expect_close(binary_cross_entropy_with_logits(x, y, Reduction::None, pw), ref, 1e-12, 1e-12);
  // Gradient: (1 - y) s(x) - w y (1 - s(x)), over N for the mean.
  Tensor xg = x.detach().requires_grad_();
  binary_cross_entropy_with_logits(xg, y, Reduction::Mean, pw).backward();
  std::vector<double> want;
  for (size_t i = 0; i < xv.size(); ++i) {
    double s = 1 / (1 + std::exp(-xv[i]));
    want.push_back(((1 - yv[i]) * s - w[i % 3] * yv[i] * (1 - s)) / 15);
  }
  expect_close(xg.grad(), want, 1e-12, 1e-10);
}

TEST(Loss, BceWithLogitsStaysFiniteAtExtremeLogits) {
  for (DType dt : {f32, f64}) {
    Tensor x = from_vector<double>({100, -100, 100, -100, 0}).to(dt).requires_grad_();
    Tensor y = from_vector<double>({0, 1, 1, 0, 1}).to(dt);
    Tensor loss = binary_cross_entropy_with_logits(x, y, Reduction::None);
    // softplus(100) = 100 (+3.7e-44), softplus(-100) ~ 3.7e-44, softplus(0) = log 2.
    expect_close(loss, {100, 100, 0, 0, std::log(2.0)}, 1e-6, 1e-7);
    binary_cross_entropy_with_logits(x, y, Reduction::Sum).backward();
    expect_close(x.grad(), {1, -1, 0, 0, -0.5}, 1e-7);  // s(x) - y
    Tensor pw = from_vector<double>({3}).to(dt);
    Tensor lw = binary_cross_entropy_with_logits(x.detach(), y, Reduction::None, pw);
    expect_close(lw, {100, 300, 0, 0, 3 * std::log(2.0)}, 1e-6, 1e-7);
  }
}
