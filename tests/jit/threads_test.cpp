// tests/jit/threads_test.cpp -- load from several threads: 8 threads, each training a small model
// of its own through its own traced step and compiled loss, for a fixed number of steps, get
// exactly (bitwise) what the same training gives on one thread alone. The kernel cache, the
// disk cache, the pool and the allocator are shared between them.
#include <thread>

#include "jit_test_util.h"

namespace kiln {
namespace {

struct ThreadNet : nn::Module {
  nn::Linear fc1{6, 16}, fc2{16, 4};
  ThreadNet() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(gelu(fc1(x))); }
};

// What one run produces: each step's loss, then the final weights.
struct Result {
  std::vector<Tensor> losses, weights;
};

// A model whose weights depend on `k` only (no shared generator: threads would race for draws),
// trained for `steps` steps on batches made the same way: half by a traced whole step (SGD with
// momentum), half by a compiled loss with an eager backward and update.
Result train(int k, int steps) {
  ThreadNet net;
  {
    NoGradGuard g;
    int i = 0;
    for (Tensor& p : net.parameters()) {
      int64_t n = p.numel();
      p.copy_((sin(arange(n).to(f32) * (0.37 + 0.05 * k) + ++i) * 0.3).reshape(p.shape()));
    }
  }
  optim::SGD opt(net.parameters(), 0.05, {.momentum = 0.9});
  jit::Function step(
      [&](std::span<const Tensor> in) {
        opt.zero_grad();
        Tensor loss = cross_entropy(net(in[0]), in[1]);
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss};
      },
      "step");
  jit::Function loss_fn(
      [&](std::span<const Tensor> in) { return std::vector<Tensor>{cross_entropy(net(in[0]), in[1])}; }, "loss");
  Result run;
  for (int s = 0; s < steps; ++s) {
    Tensor x = cos(arange(8 * 6).to(f32).reshape({8, 6}) * (0.1 * (s + 1)) + k);
    std::vector<int64_t> labels;
    for (int i = 0; i < 8; ++i) labels.push_back((i + s + k) % 4);
    Tensor y = from_vector<int64_t>(labels);
    Tensor loss;
    if (s % 2 == 0) {
      loss = step.call(std::vector<Tensor>{x, y})[0];
    } else {
      opt.zero_grad();
      loss = loss_fn.call(std::vector<Tensor>{x, y})[0];
      loss.backward();
      opt.step();
    }
    run.losses.push_back(loss.detach().clone());
  }
  for (const Tensor& p : net.parameters()) run.weights.push_back(p.detach().clone());
  return run;
}

TEST(Threads, EightThreadsTrainingTheirOwnModelsMatchOneThreadBitwise) {
  constexpr int kThreads = 8, kSteps = 12;
  std::vector<Result> alone;
  for (int k = 0; k < kThreads; ++k) alone.push_back(train(k, kSteps));
  std::vector<Result> together(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k)
    threads.emplace_back([&, k] {
      try {
        together[static_cast<size_t>(k)] = train(k, kSteps);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(k)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kThreads; ++k) {
    SCOPED_TRACE(testing::Message() << "thread " << k);
    ASSERT_EQ(errors[static_cast<size_t>(k)], "");
    const Result &a = alone[static_cast<size_t>(k)], &b = together[static_cast<size_t>(k)];
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t s = 0; s < a.losses.size(); ++s)
      EXPECT_TRUE(test::bitwise_equal(b.losses[s], a.losses[s]))
          << "step " << s << ": " << b.losses[s] << " alone " << a.losses[s];
    for (size_t w = 0; w < a.weights.size(); ++w)
      EXPECT_TRUE(test::bitwise_equal(b.weights[w], a.weights[w])) << "weight " << w;
  }
}

}  // namespace
}  // namespace kiln
