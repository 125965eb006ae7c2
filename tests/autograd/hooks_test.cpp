// tests/autograd/hooks_test.cpp -- post-accumulate-grad hooks and queued callbacks: a leaf's
// hooks run once per backward, after its last gradient; a compiled backward fires them as it
// writes each gradient; autograd::grad fires none; callbacks run when backward ends.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "tests/unit/test_util.h"

using namespace kiln;
using kiln::test::expect_error;

namespace {

TEST(PostAccumulateGradHook, RunsOnceAfterTheLastGradientOfThePass) {
  Tensor x = from_vector<float>({1, 2, 3}).requires_grad_();
  std::vector<std::vector<float>> seen;
  autograd::register_post_accumulate_grad_hook(x,
                                               [&](const Tensor& t) { seen.push_back(t.grad().to_vector<float>()); });
  (x * 2 + exp(x) * 0 + x * 3).sum().backward();  // three paths into x
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{5, 5, 5}));
  (x * 2).sum().backward();  // accumulates: the hook sees the sum
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<float>{7, 7, 7}));
}

TEST(PostAccumulateGradHook, RunInRegistrationOrderUntilRemoved) {
  Tensor x = ones({2}).requires_grad_();
  std::string order;
  autograd::HookHandle a = autograd::register_post_accumulate_grad_hook(x, [&](const Tensor&) { order += "a"; });
  autograd::register_post_accumulate_grad_hook(x, [&](const Tensor&) { order += "b"; });
  (x * x).sum().backward();
  a.remove();
  a.remove();  // twice is harmless
  (x * x).sum().backward();
  EXPECT_EQ(order, "abb");
}

TEST(PostAccumulateGradHook, AnOutputThatIsTheLeafFiresToo) {
  Tensor x = ones({3}).requires_grad_();
  int n = 0;
  autograd::register_post_accumulate_grad_hook(x, [&](const Tensor&) { ++n; });
  x.backward(full({3}, 2.0));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

TEST(PostAccumulateGradHook, GradAccumulatesNothingAndFiresNothing) {
  Tensor x = ones({3}).requires_grad_();
  int n = 0;
  autograd::register_post_accumulate_grad_hook(x, [&](const Tensor&) { ++n; });
  autograd::grad({(x * x).sum()}, {x});
  EXPECT_EQ(n, 0);
  EXPECT_FALSE(x.grad().defined());
}

TEST(PostAccumulateGradHook, OnlyOnLeavesThatRequireGrad) {
  Tensor x = ones({3}).requires_grad_();
  expect_error([&] { autograd::register_post_accumulate_grad_hook(x * 2, [](const Tensor&) {}); },
               {"register_post_accumulate_grad_hook", "leaf", "made by an op"});
  expect_error([&] { autograd::register_post_accumulate_grad_hook(ones({3}), [](const Tensor&) {}); },
               {"register_post_accumulate_grad_hook", "does not require grad"});
}

TEST(QueueCallback, RunsWhenBackwardEndsAfterEveryHook) {
  Tensor x = ones({2}).requires_grad_(), y = ones({2}).requires_grad_();
  std::string order;
  autograd::register_post_accumulate_grad_hook(x, [&](const Tensor&) {
    order += "x";
    autograd::queue_callback([&] { order += "!"; });
  });
  autograd::register_post_accumulate_grad_hook(y, [&](const Tensor&) { order += "y"; });
  (x * y).sum().backward();
  EXPECT_EQ(order.size(), 3u);
  EXPECT_EQ(order.back(), '!');
  expect_error([] { autograd::queue_callback([] {}); }, {"queue_callback", "no backward pass"});
}

// A compiled function's backward hands each gradient over as its kernel or op wrote it: the
// last layer's hook runs before the first layer's gradient exists, as eagerly.
TEST(PostAccumulateGradHook, ACompiledBackwardFiresThemAsItWritesEachGradient) {
  manual_seed(3);
  Tensor w1 = randn({4, 8}).requires_grad_(), w2 = randn({8, 2}).requires_grad_();
  auto f = [&](Tensor x) { return matmul(relu(matmul(x, w1)), w2).sum(); };
  for (bool compiled : {false, true}) {
    SCOPED_TRACE(compiled ? "compiled" : "eager");
    w1.set_grad({}), w2.set_grad({});
    std::string order;
    bool w1_grad_seen_early = true;
    autograd::HookHandle h1 = autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor&) { order += "1"; });
    autograd::HookHandle h2 = autograd::register_post_accumulate_grad_hook(w2, [&](const Tensor&) {
      order += "2";
      w1_grad_seen_early = w1.grad().defined();
    });
    Tensor x = randn({3, 4});
    if (compiled) {
      auto fast = jit::trace(f, {x});
      fast(x).backward();
    } else {
      f(x).backward();
    }
    EXPECT_EQ(order, "21");
    EXPECT_FALSE(w1_grad_seen_early);
    EXPECT_TRUE(w1.grad().defined() && w2.grad().defined());
    h1.remove(), h2.remove();
  }
}

}  // namespace
