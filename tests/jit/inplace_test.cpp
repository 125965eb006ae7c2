// tests/jit/inplace_test.cpp -- in-place writes inside traced functions: into values the
// function computed, captured tensors and literals; views and aliases of what was written;
// constants handed to the caller; traced functions that call traced functions.
#include "jit_test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test::expect_same;

TEST(InPlace, WritesIntoComputedValuesMatchEager) {
  auto f = [](Tensor a) {
    Tensor y = a * 2;
    y.add_(1).mul_(y);
    y.clamp_(-3.0, 20.0);
    return y.t() + y;  // views taken after the writes see them
  };
  Tensor x = randn({3, 3});
  auto fast = jit::trace(f, {x});
  x = randn({3, 3});
  expect_same(fast(x), f(x));
}

TEST(InPlace, ViewsAndAliasesReadAfterAWriteThrow) {
  Tensor x = randn({4});
  expect_error(
      [&] {
        jit::trace(
            [](Tensor a) {
              Tensor y = a * 2;
              Tensor v = y.reshape({2, 2});
              y.add_(1);  // eagerly v sees this
              return v;
            },
            {x});
      },
      {"jit::trace", "reshape", "read after an in-place write"});
  expect_error(
      [&] {
        jit::trace(
            [](Tensor a) {
              Tensor y = a * 2;
              Tensor d = y.detach();
              y.mul_(3.0);
              return d + 1;
            },
            {x});
      },
      {"read after an in-place write"});
  Tensor w = randn({4});
  expect_error(
      [&] {
        jit::trace(
            [&](Tensor a) {
              Tensor v = w.slice(0, 0, 2);
              NoGradGuard no_grad;
              w.add_(a);
              return v.sum();
            },
            {x});
      },
      {"slice", "read after an in-place write"});
}

TEST(InPlace, WriteThroughAViewThrows) {
  Tensor buf = zeros({4});
  expect_error(
      [&] {
        jit::trace(
            [&](Tensor a) {
              NoGradGuard no_grad;
              buf.slice(0, 0, 2).add_(1.0);
              return a + buf;
            },
            {randn({4})});
      },
      {"in-place write through a view", "slice"});
}

TEST(InPlace, CapturedTensorsAreWrittenOnEveryCall) {
  Tensor count = zeros({}), total = zeros({3});
  auto f = [&](Tensor a) {
    NoGradGuard no_grad;
    count.add_(1);
    total.add_(a);
    return total / count;  // reads after the writes see them
  };
  Tensor x = from_vector<float>({1, 2, 3});
  auto fast = jit::trace(f, {x});
  expect_same(count, scalar_tensor(0.0f));  // tracing writes nothing
  fast(x);
  fast(x * 3);
  expect_same(fast(x * 5), from_vector<float>({3, 6, 9}));
  expect_same(count, scalar_tensor(3.0f));
}

TEST(InPlace, ReturnedConstantsAreFreshEachCall) {
  auto fast = jit::trace(
      [](Tensor a) {
        return std::make_tuple(arange(3).to(f32).reshape({1, 3}), a + 1);
      },
      {ones({3})});
  Tensor r = fast(ones({3}));
  {
    NoGradGuard no_grad;
    r.add_(100);  // the caller's tensor; the next call's constant is untouched
  }
  expect_same(fast(ones({3})), from_vector<float>({0, 1, 2}, {1, 3}));
}

TEST(InPlace, TracedFunctionsCallingTracedFunctionsInline) {
  Tensor w = randn({4});
  auto inner = jit::trace([&](Tensor a) { return exp(a) * w + arange(4).to(f32); }, {randn({4})});
  auto outer = jit::trace([&](Tensor a) { return inner(a * 2) - 1; }, {randn({4})});
  Tensor x = randn({4});
  expect_same(outer(x), (exp(x * 2) * w + arange(4).to(f32)) - 1);
  EXPECT_EQ(outer.stats().traces, 1);
  ir::Graph outer_graph = outer.graph();
  for (const ir::Node& n : outer_graph.nodes) EXPECT_NE(n.kind, ir::NodeKind::Assign);
}

}  // namespace
}  // namespace kiln
