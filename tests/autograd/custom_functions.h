// tests/autograd/custom_functions.h -- custom autograd functions the eager and the traced tests
// share (tests/autograd/function_test.cpp, tests/jit/custom_function_test.cpp).
#pragma once

#include "autograd/function.h"
#include "runtime/api.h"

namespace kiln::test {

// round(x) forward; the incoming gradient passed through where |x| <= 1 (a clipped
// straight-through estimator): not the derivative of round, which is 0, so a gradient that
// reaches past it shows the user's rule ran.
struct RoundSte : autograd::Function<RoundSte> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return round(x);
  }
  static autograd::tensor_list backward(autograd::AutogradContext* ctx, autograd::tensor_list g) {
    Tensor x = ctx->get_saved_variables()[0];
    return {g[0] * (abs(x) <= 1).to(g[0].dtype())};
  }
};

}  // namespace kiln::test
