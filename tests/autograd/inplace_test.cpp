// tests/autograd/inplace_test.cpp -- in-place ops: their results, version counters that make
// backward throw when a saved tensor was overwritten, the leaf and view rules, and gradients
// through in-place updates of tensors with history.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;

namespace {

Tensor leaf_1d(const std::vector<double>& v) {
  Tensor t = from_vector(v);
  t.requires_grad_();
  return t;
}

uint32_t version(const Tensor& t) { return t.impl()->storage->version(); }

}  // namespace

TEST(InPlace, ArithmeticWritesIntoTheTensorAndReturnsIt) {
  Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2});
  void* data = a.data_ptr();
  Tensor& r = a.add_(from_vector<double>({10, 20}));  // broadcast over rows
  EXPECT_EQ(&r, &a);
  EXPECT_EQ(a.data_ptr(), data);
  expect_close(a, {11, 22, 13, 24}, 0);
  a.sub_(1);
  expect_close(a, {10, 21, 12, 23}, 0);
  a.mul_(from_vector<double>({2, 0.5, -1, 1}, {2, 2}));
  expect_close(a, {20, 10.5, -12, 23}, 0);
  a.div_(4);
  expect_close(a, {5, 2.625, -3, 5.75}, 0);
  a.sub_(from_vector<double>({1}, {1}));
  expect_close(a, {4, 1.625, -4, 4.75}, 0);
  a.mul_(2).add_(1);  // chains
  expect_close(a, {9, 4.25, -7, 10.5}, 0);
  a.div_(from_vector<double>({2, 4}));
  expect_close(a, {4.5, 1.0625, -3.5, 2.625}, 0);
}

TEST(InPlace, ClampZeroFillAndCopy) {
  Tensor a = from_vector<float>({-3, -0.5, 0.5, 3});
  a.clamp_(-1, 1);
  expect_close(a, {-1, -0.5, 0.5, 1}, 0);
  a.clamp_(std::nullopt, 0.0);
  expect_close(a, {-1, -0.5, 0, 0}, 0);
  a.clamp_(-0.75, std::nullopt);
  expect_close(a, {-0.75, -0.5, 0, 0}, 0);
  a.fill_(2.5);
  expect_close(a, {2.5, 2.5, 2.5, 2.5}, 0);
  a.zero_();
  expect_close(a, {0, 0, 0, 0}, 0);
  a.copy_(from_vector<int64_t>({1, 2, 3, 4}));  // converts
  EXPECT_EQ(a.dtype(), f32);
  expect_close(a, {1, 2, 3, 4}, 0);
  a.copy_(from_vector<double>({7}, {1}));  // broadcasts
  expect_close(a, {7, 7, 7, 7}, 0);
  expect_error([&] { a.copy_(from_vector<double>({1, 2})); }, {"copy_", "[2]", "[4]"});
  expect_error([&] { a.copy_(zeros({2, 4})); }, {"copy_", "f32[2,4]", "f32[4]", "in place"});
  expect_close(a, {7, 7, 7, 7}, 0);
}

TEST(InPlace, WritesThroughAViewReachTheBase) {
  Tensor a = zeros({2, 3}, f64);
  Tensor row = a.select(0, 1);
  row.fill_(5);
  a.slice(1, 0, 1).add_(1);
  expect_close(a, {1, 0, 0, 6, 5, 5}, 0);
  Tensor t = a.t();  // non-contiguous destination
  t.copy_(from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}));
  expect_close(a, {1, 3, 5, 2, 4, 6}, 0);
}

TEST(InPlace, IntegerTensorsKeepTheirDtype) {
  Tensor i = from_vector<int64_t>({1, 2, 3});
  i.mul_(3).add_(from_vector<int32_t>({1, 1, 1}));
  EXPECT_EQ(i.dtype(), i64);
  expect_close(i, {4, 7, 10}, 0);
  i.clamp_(5, 8);
  expect_close(i, {5, 7, 8}, 0);
  i.copy_(from_vector<bool>({true, false, true}));
  expect_close(i, {1, 0, 1}, 0);
}

TEST(InPlace, WritingAFloatIntoAnIntegerTensorThrows) {
  Tensor i = from_vector<int64_t>({1, 2, 3});
  expect_error([&] { i.add_(1.5); }, {"add_", "f32", "i64[3]", "in place"});
  expect_error([&] { i.div_(2); }, {"div_", "in place"});  // true division gives floats
  expect_error([&] { i.mul_(from_vector<float>({1, 2, 3})); }, {"mul_", "in place"});
  expect_error([&] { i.copy_(from_vector<double>({1, 2, 3})); }, {"copy_", "in place"});
  expect_close(i, {1, 2, 3}, 0);  // nothing was written
  Tensor b = from_vector<bool>({true, false});
  expect_error([&] { b.copy_(from_vector<int64_t>({1, 0})); }, {"copy_", "bool"});
}

TEST(InPlace, InPlaceOpsBumpTheVersion) {
  Tensor a = zeros({3});
  uint32_t v0 = version(a);
  a.add_(1);
  EXPECT_EQ(version(a), v0 + 1);
  Tensor view = a.slice(0, 1, 3);
  view.mul_(2);
  EXPECT_EQ(version(a), v0 + 2);  // views share the counter
  Tensor b = a + 1;               // out of place: no bump
  EXPECT_EQ(version(a), v0 + 2);
  EXPECT_EQ(version(b), 0u);
}

TEST(InPlace, ModifyingASavedOutputMakesBackwardThrow) {
  Tensor x = leaf_1d({0.5, 1});
  Tensor y = x.exp();  // exp saves its output
  y.add_(1);           // recorded (y has history), but the saved output is now stale
  expect_close(y, {std::exp(0.5) + 1, std::exp(1.0) + 1}, 1e-12);
  expect_error([&] { y.sum().backward(); }, {"backward", "exp", "in-place", "version"});
}

TEST(InPlace, ModifyingASavedInputUnderNoGradMakesBackwardThrow) {
  Tensor a = leaf_1d({1, 2});
  Tensor b = from_vector<double>({3, 4});
  Tensor z = a * b;  // d/da reads b
  {
    NoGradGuard no_grad;
    b.mul_(2);
  }
  expect_error([&] { z.sum().backward(); }, {"backward", "mul", "in-place", "version"});
  Tensor c = leaf_1d({5, 6});
  Tensor z2 = a * c;  // d/dc reads a
  {
    NoGradGuard no_grad;
    a.mul_(2);  // the leaf itself, as an optimizer would
  }
  expect_error([&] { z2.sum().backward(); }, {"mul", "an input", "in-place"});
  EXPECT_FALSE(a.grad().defined());
}

TEST(InPlace, ModifyingAnInputNoGradientReadsIsAllowed) {
  // d(a * b)/da is b: a's own value is not needed when b needs no gradient (as in PyTorch).
  Tensor a = leaf_1d({1, 2});
  Tensor b = from_vector<double>({3, 4});
  Tensor z = a * b;
  {
    NoGradGuard no_grad;
    a.mul_(10);
  }
  z.sum().backward();
  expect_close(a.grad(), {3, 4}, 0);
  Tensor d = leaf_1d({2, 8});
  Tensor q = d / 4.0;
  {
    NoGradGuard no_grad;
    d.zero_();
  }
  q.sum().backward();
  expect_close(d.grad(), {0.25, 0.25}, 0);
  Tensor e = leaf_1d({2, 8});
  Tensor r = 4.0 / e;  // d/de = -4 / e^2 reads e
  {
    NoGradGuard no_grad;
    e.add_(1);
  }
  expect_error([&] { r.sum().backward(); }, {"div", "in-place"});
}

TEST(InPlace, ModifyingATensorNoRuleReadsDoesNotBreakBackward) {
  Tensor x = leaf_1d({1, 2});
  Tensor c = from_vector<double>({5, 6});
  Tensor y = x + c;  // add saves nothing
  c.mul_(10);
  y.sum().backward();
  expect_close(x.grad(), {1, 1}, 0);
}

TEST(InPlace, OnALeafThatRequiresGradThrowsOutsideNoGrad) {
  Tensor w = leaf_1d({1, 2});
  expect_error([&] { w.add_(1); }, {"add_", "leaf", "requires grad", "NoGradGuard"});
  expect_error([&] { w.zero_(); }, {"leaf"});
  expect_error([&] { w.copy_(from_vector<double>({0, 0})); }, {"copy_", "leaf"});
  expect_close(w, {1, 2}, 0);
}

TEST(InPlace, OptimizerStyleUpdateUnderNoGradWorks) {
  Tensor w = leaf_1d({1, 2});
  Tensor target = from_vector<double>({0, 0});
  for (int step = 0; step < 3; ++step) {
    Tensor loss = ((w - target) * (w - target)).sum();
    loss.backward();
    {
      NoGradGuard no_grad;
      w.sub_(w.grad() * 0.25);  // w -= 0.25 * 2w = 0.5 w
    }
    EXPECT_TRUE(w.is_leaf());
    EXPECT_TRUE(w.requires_grad());
    w.zero_grad();
  }
  expect_close(w, {0.125, 0.25}, 1e-15);
}

TEST(InPlace, OnAViewOfALeafThatRequiresGradThrows) {
  Tensor w = leaf_1d({1, 2, 3});
  Tensor v = w.slice(0, 0, 2);
  expect_error([&] { v.mul_(2); }, {"mul_", "view", "requires grad"});
  expect_error([&] { w.select(0, 2).fill_(0); }, {"fill_", "view"});
  expect_close(w, {1, 2, 3}, 0);
  {
    NoGradGuard no_grad;
    v.mul_(2);
  }
  expect_close(w, {2, 4, 3}, 0);
}

TEST(InPlace, OnANonLeafWithHistoryGivesTheRightGradient) {
  Tensor x = leaf_1d({1, -2, 3});
  Tensor y = x * 2.0;
  y.add_(x);
  EXPECT_EQ(y.grad_fn_name(), "add");
  expect_close(y, {3, -6, 9}, 0);
  y.sum().backward();
  expect_close(x.grad(), {3, 3, 3}, 0);
}

TEST(InPlace, ChainedInPlaceOpsOnANonLeaf) {
  Tensor x = leaf_1d({1, 2});
  Tensor y = x + 0.0;
  y.sub_(x * x).add_(5);  // y = x - x^2 + 5
  y.sum().backward();
  expect_close(x.grad(), {1 - 2 * 1, 1 - 2 * 2}, 0);
}

TEST(InPlace, ScalingANonLeafInPlace) {
  // The old value of y is not needed for d(3 y)/dy, so this is not a stale save.
  Tensor x = leaf_1d({1, 2});
  Tensor y = x * x;
  y.mul_(3);
  y.sum().backward();
  expect_close(x.grad(), {6, 12}, 0);
  Tensor x2 = leaf_1d({1, 4});
  Tensor z = x2 + 1.0;
  z.div_(2);
  z.sum().backward();
  expect_close(x2.grad(), {0.5, 0.5}, 0);
}

TEST(InPlace, CopyingAValueWithHistoryIntoAPlainTensorLinksTheGraph) {
  Tensor x = leaf_1d({1, 2});
  Tensor buf = zeros({2}, f64);
  buf.copy_(x * 3.0);
  EXPECT_TRUE(buf.requires_grad());
  (buf * buf).sum().backward();  // 9 x^2 -> 18 x
  expect_close(x.grad(), {18, 36}, 0);
  Tensor x2 = leaf_1d({1, 2});
  Tensor buf2 = zeros({2}, f64);
  buf2.copy_(x2);  // straight from a leaf
  (buf2 * 4.0).sum().backward();
  expect_close(x2.grad(), {4, 4}, 0);
}

TEST(InPlace, OverwritingWithAConstantDropsTheHistory) {
  Tensor x = leaf_1d({1, 2});
  Tensor y = x * 2.0;
  Tensor z = y * 1.0 + x;  // uses y's old value, through a graph y.fill_ must not disturb
  y.fill_(7);
  expect_close(y, {7, 7}, 0);
  Tensor w = y + x;  // only the path through x remains
  w.sum().backward();
  expect_close(x.grad(), {1, 1}, 0);
  z.sum().backward();  // y * 1.0 needs not y but the 1.0 for its gradient: no stale save
  expect_close(x.grad(), {1 + 3, 1 + 3}, 0);
}
