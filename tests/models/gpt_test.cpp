// tests/models/gpt_test.cpp -- the example GPT (examples/models/gpt.h): traced whole steps
// train as eager ones do, and its forward saves with the batch and the length dynamic and
// serves every length from 1 to its context.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "examples/models/gpt_task.h"
#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

using examples::GPTConfig;
using examples::GPTTask;

GPTConfig small() { return {.vocab = 256, .context = 16, .embed = 32, .heads = 4, .layers = 2, .dropout = 0.1}; }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_gpt_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Two copies from one seed, trained on the same batches: one eagerly, one as a traced whole step
// (forward, backward, AdamW). Dropout draws the same masks in both (the generator's counters).
TEST(Gpt, TracedStepsTrainAsEagerOnesDo) {
  manual_seed(3);
  GPTTask eager(small(), 4), traced(small(), 4);
  traced.net.load_state_dict(eager.net.state_dict());
  std::vector<std::vector<Tensor>> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(eager.batch(i));
  optim::AdamW eager_opt(eager.net.parameters(), 1e-3), traced_opt(traced.net.parameters(), 1e-3);
  auto step = [](GPTTask& task, optim::Optimizer& opt) {
    return [&task, &opt](std::span<const Tensor> b) {
      opt.zero_grad();
      Tensor loss = task.loss(b);
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss.detach()};
    };
  };
  auto eager_step = step(eager, eager_opt);
  jit::Function fast = jit::trace_tensors(step(traced, traced_opt), batches[0], "gpt_step");
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    uint64_t seed = 100 + static_cast<uint64_t>(i);
    manual_seed(seed);
    Tensor want = eager_step(batches[static_cast<size_t>(i)])[0];
    manual_seed(seed);
    Tensor got = fast.call(batches[static_cast<size_t>(i)])[0];
    EXPECT_TRUE(test::close_enough(got, want)) << got.item<double>() << " vs " << want.item<double>();
    if (i == 0) {  // the first step's gradients, before the updates have had time to drift
      auto ep = eager.net.named_parameters(), tp = traced.net.named_parameters();
      ASSERT_EQ(ep.size(), tp.size());
      for (size_t k = 0; k < ep.size(); ++k) {
        SCOPED_TRACE(ep[k].first);
        ASSERT_TRUE(tp[k].second.grad().defined());
        EXPECT_TRUE(test::close_enough(tp[k].second.grad(), ep[k].second.grad()));
      }
    }
  }
  for (auto& [name, p] : traced.net.named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(test::close_enough(p, eager.net.state_dict().at(name)));
  }
}

// The loaded forward takes any batch and any length up to the context, as the GPT itself does.
TEST(Gpt, SavedForwardKeepsBatchAndLengthDynamic) {
  manual_seed(4);
  GPTTask task(small(), 3);
  std::vector<Tensor> batch = task.batch(0);
  std::string path = temp_path("forward.kiln");
  examples::save_forward(task, batch, path, jit::SaveOptions().dynamic(0, 0, "B").dynamic(0, 1, "T"));
  jit::LoadedFunction f = jit::load(path);
  EXPECT_EQ(f.inputs()[0].type, "i64[B,T]");
  EXPECT_EQ(f.outputs()[0].type, "f32[B,T,256]");
  task.net.eval();
  NoGradGuard no_grad;
  for (int64_t t = 1; t <= task.net.config.context; ++t) {
    SCOPED_TRACE(t);
    int64_t b = t % 3 + 1;
    Tensor idx = randint(0, 256, {b, t});
    test::expect_same(f(idx), task.net(idx));
  }
  // Past the context the position table has no row: the loaded module says so, as eager does.
  test::expect_error([&] { f(randint(0, 256, {1, 17})); }, {"index"});
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln
