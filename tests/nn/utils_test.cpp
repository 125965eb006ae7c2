// tests/nn/utils_test.cpp -- nn::utils (nn/utils.cpp): gradient clipping by norm and by value,
// in torch's terms (the total norm before clipping returned, non-finite norms refused on ask).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

TEST(ClipGrad, ScalesToTheMaxNormAndReturnsTheNormBefore) {
  Tensor a = zeros({2}, f64).requires_grad_(), b = zeros({1}, f64).requires_grad_(), c = zeros({3}).requires_grad_();
  auto set = [&] {
    a.set_grad(from_vector(std::vector<double>{3, 4}));
    b.set_grad(from_vector(std::vector<double>{-12}));
  };
  set();
  Tensor total = nn::utils::clip_grad_norm_({a, b, c}, 6.5);  // c has no gradient: skipped
  EXPECT_NEAR(total.item<double>(), 13, 1e-12);
  double s = 6.5 / (13 + 1e-6);
  expect_close(a.grad(), {3 * s, 4 * s}, 1e-12, 1e-12);
  expect_close(b.grad(), {-12 * s}, 1e-12, 1e-12);
  set();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 100).item<double>(), 13, 1e-12);
  expect_close(a.grad(), {3, 4}, 0, 0);  // below the bound: untouched
  set();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 6, std::numeric_limits<double>::infinity()).item<double>(), 12, 0);
  expect_close(b.grad(), {-12 * 6 / (12 + 1e-6)}, 1e-12, 1e-12);
  set();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 100, 1).item<double>(), 19, 1e-12);
  a.set_grad(from_vector(std::vector<double>{std::numeric_limits<double>::infinity(), 0}));
  expect_error(
      [&] {
        nn::utils::clip_grad_norm_({a, b}, 1, 2, true);
      },
      {"clip_grad_norm_", "inf", "error_if_nonfinite"});
  set();
  nn::utils::clip_grad_value_({a, b}, 3.5);
  expect_close(a.grad(), {3, 3.5}, 0, 0);
  expect_close(b.grad(), {-3.5}, 0, 0);
  // A gradient straight from backward may be an expanded view (sum's is): clipped all the same.
  Tensor p = randn({4}, f64).requires_grad_();
  (p.sum() * 5.0).backward();
  EXPECT_NEAR(nn::utils::clip_grad_norm_({p}, 1.0).item<double>(), 10, 1e-12);
  expect_close(p.grad(), std::vector<double>(4, 5 / (10 + 1e-6)), 1e-12, 1e-12);
  (p.sum() * 5.0).backward();
  nn::utils::clip_grad_value_({p}, 2.0);
  expect_close(p.grad(), std::vector<double>(4, 2.0), 0, 0);
}
