// tests/jit/random_test.cpp -- random draws inside traced functions: IR ops reading the
// generator's state, bound anew at each call, so a traced function draws what eager mode draws
// from the same seed and advances the generator as much.
#include <kiln/kiln.h>

#include <sstream>

#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

// Runs fn eagerly `calls` times from `seed`, then traced from the same seed: the same values,
// call by call, and the generator left at the same place (the next draw agrees too).
void expect_draws_as_eagerly(const std::function<Tensor(Tensor)>& fn, const Tensor& x, int calls = 3) {
  manual_seed(11);
  std::vector<Tensor> eager;
  for (int i = 0; i < calls; ++i) eager.push_back(fn(x));
  Tensor eager_next = rand({3});
  manual_seed(11);
  auto fast = jit::trace(fn, {x});  // tracing draws nothing
  for (int i = 0; i < calls; ++i) {
    SCOPED_TRACE(testing::Message() << "call " << i);
    Tensor got = fast(x);
    test::expect_same(got.detach(), eager[static_cast<size_t>(i)].detach());
  }
  test::expect_same(rand({3}), eager_next);
  EXPECT_EQ(fast.stats().traces, 1);
}

TEST(TraceRandom, DrawsInsideTheFunctionAreFreshEachCallAsEagerly) {
  Tensor x = randn({4, 3});
  expect_draws_as_eagerly([](Tensor t) { return t * bernoulli({4, 3}, 0.5); }, x);
  expect_draws_as_eagerly([](Tensor t) { return t + randn({4, 3}) * 0.1 + rand({3}, DType::F64).to(DType::F32); }, x);
  nn::Dropout drop(0.3);
  expect_draws_as_eagerly([&](Tensor t) { return drop(exp(t)); }, x);
}

TEST(TraceRandom, TheDrawsAreOpsOfTheGraphNotConstants) {
  Tensor x = randn({4, 3});
  auto fast = jit::trace([](Tensor t) { return t * bernoulli({4, 3}, 0.5) + randn({3}); }, {x});
  std::string text = test::text_of(fast.graph());
  EXPECT_NE(text.find(" = rand "), std::string::npos) << text;
  EXPECT_NE(text.find(" = randn "), std::string::npos) << text;
  // The only constants are the draws' offsets into the call's stream, i64[2].
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.find(" = const ") != std::string::npos) {
      EXPECT_NE(line.find(": i64[2]"), std::string::npos) << line;
    }
}

TEST(TraceRandom, DropoutInACompiledForwardGivesEagersMaskToItsBackward) {
  Tensor w = randn({3, 5}).requires_grad_();
  nn::Dropout drop(0.4);
  auto fn = [&](Tensor t) { return sum(drop(matmul(t, w)) * t.sum()); };
  Tensor x = randn({4, 3});
  manual_seed(2);
  fn(x).backward();
  Tensor want = w.grad();
  w.zero_grad();
  manual_seed(2);
  auto fast = jit::trace(fn, {x});
  Tensor loss = fast(x);
  EXPECT_EQ(loss.grad_fn_name(), "jit @fn");
  loss.backward();
  test::expect_same(w.grad(), want);
}

TEST(TraceRandom, DrawsThatAreNoOpsStillThrowInsteadOfBecomingConstants) {
  Tensor x = randn({4});
  test::expect_error([&] { jit::trace([](Tensor t) { return t + randint(0, 3, {4}).to(DType::F32); }, {x}); },
                     {"randint", "traced function", "pass the tensor in"});
  test::expect_error([&] { jit::trace([](Tensor t) { return index_select(t, 0, randperm(4)); }, {x}); },
                     {"randperm", "traced function"});
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
  drop.eval();  // evaluation mode draws nothing
  auto g = jit::trace([&](Tensor t) { return drop(t); }, {x});
  test::expect_same(g(x), x);
}

TEST(TraceRandom, TheRandomOpsCheckTheirOperand) {
  Attrs a;
  a.shape = {3};
  a.dtype = DType::F32;
  test::expect_error([&] { apply(OpId::Rand, {zeros({2})}, a); }, {"rand", "i64[2]", "f32[2]"});
  a.dtype = DType::I32;
  test::expect_error([&] { apply(OpId::Randn, {zeros({2}, DType::I64)}, a); }, {"randn", "float", "i32"});
  a.dtype = DType::F32;
  a.shape = {-1};
  test::expect_error([&] { apply(OpId::Rand, {zeros({2}, DType::I64)}, a); }, {"rand", "negative"});
}

}  // namespace
}  // namespace kiln
