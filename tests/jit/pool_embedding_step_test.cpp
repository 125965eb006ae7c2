// tests/jit/pool_embedding_step_test.cpp -- a traced step through embedding, max_pool2d and
// avg_pool2d records their backward ops (index_add, max_pool2d_backward, avg_pool2d_backward)
// and computes eager's gradients on every call; double backward traces too.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>

#include "ir/graph.h"
#include "jit_test_util.h"

namespace kiln {
namespace {

using test::expect_same;

struct Params {
  Tensor table = randn({12, 4}).requires_grad_();
  Tensor scale = randn({4, 3, 3}).requires_grad_();
};

// tokens [2, 9] -> embedding [2, 9, 4] -> planes [2, 4, 3, 3] -> pools -> loss.
Tensor loss_of(const Params& p, const Tensor& tokens) {
  Tensor h = embedding(tokens, p.table).reshape({2, 3, 3, 4}).permute({0, 3, 1, 2}) * p.scale;
  Tensor m = max_pool2d(h, {2, 2}, {1, 1}, {1, 1}, true);   // [2, 4, 4, 4]
  Tensor a = avg_pool2d(m, {3, 3}, {2, 2}, {1, 1}, false);  // [2, 4, 2, 2]
  return (a * a).sum() + max_pool2d(h, {3, 3}, {2, 2}).sum();
}

TEST(PoolEmbeddingStep, TracedBackwardMatchesEagerOnEveryCall) {
  manual_seed(31);
  Params eager, traced;
  traced.table = eager.table.detach().clone().requires_grad_();
  traced.scale = eager.scale.detach().clone().requires_grad_();
  auto step = [](Params& p, const Tensor& tokens) {
    p.table.zero_grad();
    p.scale.zero_grad();
    Tensor loss = loss_of(p, tokens);
    loss.backward();
    return loss;
  };
  Tensor tokens = randint(0, 12, {2, 9});
  auto fast = jit::trace([&](Tensor t) { return step(traced, t); }, {tokens});
  std::string text = ir::print(fast.graph());
  // max_pool2d keeps its argmax (max_pool2d_indices) and scatters the gradient through it.
  for (const char* op : {"index_add", "max_pool2d_indices", "scatter_add", "avg_pool2d_backward"})
    EXPECT_NE(text.find(std::string(" = ") + op + " "), std::string::npos) << op << " not in\n"
                                                                           << text;
  for (int i = 0; i < 3; ++i) {
    Tensor t = i == 0 ? tokens : randint(0, 12, {2, 9});
    Tensor got = i == 0 ? step(traced, t) : fast(t);
    expect_same(got, step(eager, t));
    expect_same(traced.table.grad(), eager.table.grad());
    expect_same(traced.scale.grad(), eager.scale.grad());
  }
}

// The gradient of a gradient: the traced graph holds the backward ops (autograd::grad with
// create_graph inside the trace); backward through the traced call runs their own vjps
// (max_pool2d_indices and gather; avg_pool2d).
TEST(PoolEmbeddingStep, TracedDoubleBackwardMatchesEager) {
  manual_seed(32);
  Tensor x = randn({2, 3, 5, 5}).requires_grad_();
  auto f = [](const Tensor& x) {
    Tensor y =
        (avg_pool2d(max_pool2d(x, {2, 2}, {1, 1}), {2, 2}) * x.slice(2, 0, 2).slice(3, 0, 2)).sum();
    Tensor g =
        autograd::grad(std::span<const Tensor>(&y, 1), std::vector<Tensor>{x}, {}, true, true)[0];
    return (g * g).sum();
  };
  auto fast = jit::trace([&](Tensor x) { return f(x); }, {x});
  std::string text = ir::print(fast.graph());
  for (const char* op : {"max_pool2d_indices", "scatter_add", "avg_pool2d_backward"})
    EXPECT_NE(text.find(std::string(" = ") + op + " "), std::string::npos) << op << " not in\n"
                                                                           << text;
  for (int i = 0; i < 2; ++i) {
    Tensor xi = randn({2, 3, 5, 5}).requires_grad_();
    Tensor xe = xi.detach().clone().requires_grad_();
    Tensor got = fast(xi), want = f(xe);
    expect_same(got, want);
    got.backward();
    want.backward();
    expect_same(xi.grad(), xe.grad());
  }
}

}  // namespace
}  // namespace kiln
