// tests/jit/random_test.cpp -- random draws inside a traced function are refused, not frozen.
#include <gtest/gtest.h>

#include <kiln/kiln.h>

#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

TEST(TraceRandom, ADrawInsideTheFunctionThrowsInsteadOfBecomingAConstant) {
  Tensor x = randn({4, 3});
  test::expect_error([&] { jit::trace([](Tensor t) { return t * bernoulli({4, 3}, 0.5); }, {x}); },
                     {"random", "traced function", "pass the tensor in"});
  nn::Dropout drop(0.3);
  test::expect_error([&] { jit::trace([&](Tensor t) { return drop(t); }, {x}); }, {"random"});
}

TEST(TraceRandom, ADrawPassedInVariesPerCall) {
  Tensor x = ones({8});
  auto f = jit::trace([](Tensor t, Tensor mask) { return t * mask; }, {x, bernoulli({8}, 0.5)});
  manual_seed(5);
  Tensor a = f(x, bernoulli({8}, 0.5)), b = f(x, bernoulli({8}, 0.5));
  manual_seed(5);
  test::expect_same(a, x * bernoulli({8}, 0.5));
  test::expect_same(b, x * bernoulli({8}, 0.5));
  nn::Dropout drop(0.3);
  drop.eval();  // evaluation mode draws nothing: traceable
  auto g = jit::trace([&](Tensor t) { return drop(t); }, {x});
  test::expect_same(g(x), x);
}

}  // namespace
}  // namespace kiln
