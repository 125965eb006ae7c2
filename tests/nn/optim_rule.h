// tests/nn/optim_rule.h -- the problem the optimizer tests solve, and the loop that runs an
// optimizer beside its update rule written out in double.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "nn/optim.h"
#include "tests/unit/test_util.h"

namespace kiln::test {

// loss(p) = sum(a p^2 + b p), gradient 2 a p + b: a different gradient at every step.
inline const std::vector<double> kA{0.5, 1.5, 2.0, 0.1}, kB{1.0, -2.0, 0.3, 4.0}, kP0{1.0, -0.5, 2.0, 0.25};

/// The loss's gradient at p, in double.
inline std::vector<double> ref_grad(const std::vector<double>& p) {
  std::vector<double> g;
  for (size_t i = 0; i < p.size(); ++i) g.push_back(2 * kA[i] * p[i] + kB[i]);
  return g;
}

/// Accumulates the loss's gradient into p.grad().
inline void backward_of_loss(const Tensor& p) {
  Tensor a = from_vector(kA).to(p.dtype()), b = from_vector(kB).to(p.dtype());
  (a * p * p + b * p).sum().backward();
}

/// One update of the double state w by gradient g.
using Rule = std::function<void(std::vector<double>& w, const std::vector<double>& g)>;

/// Runs `steps` steps of `opt` on p (starting at kP0) and of `rule` side by side.
inline void run_against(Tensor& p, optim::Optimizer& opt, const Rule& rule, int steps = 5, double tol = 1e-12) {
  std::vector<double> want = kP0;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    backward_of_loss(p);
    opt.step();
    rule(want, ref_grad(want));
    expect_close(p, want, tol, tol);
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
  }
}

}  // namespace kiln::test
