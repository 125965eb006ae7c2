// tests/jit/pool_embedding_step_test.cpp -- a traced step through embedding, max_pool2d and
// avg_pool2d records their backward ops (index_add, max_pool2d_backward, avg_pool2d_backward)
// and computes eager's gradients on every call; double backward traces too.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <memory>
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
    EXPECT_NE(text.find(std::string(" = ") + op + " "), std::string::npos) << op << " not in\n" << text;
  for (int i = 0; i < 3; ++i) {
    Tensor t = i == 0 ? tokens : randint(0, 12, {2, 9});
    Tensor got = i == 0 ? step(traced, t) : fast(t);
    expect_same(got, step(eager, t));
    expect_same(traced.table.grad(), eager.table.grad());
    expect_same(traced.scale.grad(), eager.scale.grad());
  }
}

// The same network with dropout on the planes, trained by each optimizer with gradients
// accumulated over two traced calls (forward and backward) before each update: eager's losses,
// weights and gradients after every step, with the same dropout masks.
TEST(PoolEmbeddingStep, DropoutEachOptimizerAndAccumulationMatchEager) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  std::vector<std::pair<const char*, Make>> optimizers = {
      {"sgd",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(std::move(p), 0.05, optim::SgdOptions{.momentum = 0.9});
       }},
      {"adam", [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), 0.01); }},
      {"adamw", [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(std::move(p), 0.01); }},
  };
  for (auto& [name, make] : optimizers) {
    SCOPED_TRACE(name);
    manual_seed(33);
    Params eager, traced;
    traced.table = eager.table.detach().clone().requires_grad_();
    traced.scale = eager.scale.detach().clone().requires_grad_();
    auto eager_opt = make({eager.table, eager.scale}), traced_opt = make({traced.table, traced.scale});
    auto half_step = [](Params& p, const Tensor& tokens) {
      Tensor h = embedding(tokens, p.table).reshape({2, 3, 3, 4}).permute({0, 3, 1, 2}) * p.scale;
      h = nn::dropout(h, 0.3, true);
      Tensor m = max_pool2d(h, {2, 2}, {1, 1}, {1, 1}, true);
      Tensor loss = (avg_pool2d(m, {3, 3}, {2, 2}, {1, 1}, false) * 2.0).pow(2.0).sum();
      loss.backward();
      return loss;
    };
    Tensor tokens = randint(0, 12, {2, 9});
    auto fast = jit::trace([&](Tensor t) { return half_step(traced, t); }, {tokens});
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step);
      Tensor a = randint(0, 12, {2, 9}), b = randint(0, 12, {2, 9});
      manual_seed(100 + step);
      traced_opt->zero_grad();
      Tensor got_a = fast(a), got_b = fast(b);
      traced_opt->step();
      manual_seed(100 + step);
      eager_opt->zero_grad();
      Tensor want_a = half_step(eager, a).detach(), want_b = half_step(eager, b).detach();
      eager_opt->step();
      expect_same(got_a, want_a);
      expect_same(got_b, want_b);
      expect_same(traced.table.detach(), eager.table.detach());
      expect_same(traced.scale.detach(), eager.scale.detach());
      expect_same(traced.table.grad(), eager.table.grad());
    }
  }
}

// The gradient of a gradient: the traced graph holds the backward ops (autograd::grad with
// create_graph inside the trace); backward through the traced call runs their own vjps
// (max_pool2d_indices and gather; avg_pool2d).
TEST(PoolEmbeddingStep, TracedDoubleBackwardMatchesEager) {
  manual_seed(32);
  Tensor x = randn({2, 3, 5, 5}).requires_grad_();
  auto f = [](const Tensor& x) {
    Tensor y = (avg_pool2d(max_pool2d(x, {2, 2}, {1, 1}), {2, 2}) * x.slice(2, 0, 2).slice(3, 0, 2)).sum();
    Tensor g = autograd::grad(std::span<const Tensor>(&y, 1), std::vector<Tensor>{x}, {}, true, true)[0];
    return (g * g).sum();
  };
  auto fast = jit::trace([&](Tensor x) { return f(x); }, {x});
  std::string text = ir::print(fast.graph());
  for (const char* op : {"max_pool2d_indices", "scatter_add", "avg_pool2d_backward"})
    EXPECT_NE(text.find(std::string(" = ") + op + " "), std::string::npos) << op << " not in\n" << text;
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
