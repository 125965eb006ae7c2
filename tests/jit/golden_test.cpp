// tests/jit/golden_test.cpp -- the exact text of traced graphs (tests/jit/golden/*.ir), as the
// tracer records them, before any pass: softmax and layer_norm from primitive ops, an MLP
// training step, and the digits demo's CNN forward. UPDATE_GOLDEN=1 rewrites the files
// (UPDATE_GOLDEN=1 ./kiln_jit_tests --gtest_filter='Golden.*'); review their diff.
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "examples/digits_net.h"
#include "ir/partition.h"
#include "ir/passes.h"
#include "jit/tracer.h"
#include "jit_test_util.h"

namespace kiln {
namespace {

void expect_golden_text(const std::string& name, const std::string& text) {
  std::string path = std::string(KILN_JIT_GOLDEN_DIR) + "/" + name + ".ir";
  const char* update = std::getenv("UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << text;
  } else {
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path << " is missing; UPDATE_GOLDEN=1 writes it";
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_EQ(text, want.str()) << "the graph of " << name << " changed; if that is intended, "
                                << "rerun with UPDATE_GOLDEN=1 and review the diff of " << path;
  }
}

void expect_golden(const std::string& name, const jit::TensorFn& fn, std::vector<Tensor> args,
                   const jit::ParamNames& names = {}) {
  ir::Graph g = jit::trace_function(fn, args, name, names).graph;
  expect_golden_text(name, test::text_of(g));
  EXPECT_NO_THROW(ir::verify(g));
  test::expect_round_trip(g);
}

// The autodiff of fn (its joint trace, optimized as jit::Function does, then partitioned):
// the forward a call runs and the backward its autograd node runs, in <name>.autodiff.ir.
void expect_golden_autodiff(const std::string& name, const jit::TensorFn& fn, std::vector<Tensor> args,
                            const jit::ParamNames& names = {}) {
  jit::Trace t = jit::trace_function(fn, args, name, names, /*differentiate=*/true);
  ASSERT_TRUE(t.joint);
  ir::Graph joint = ir::run_passes(std::move(t.graph), ir::default_pipeline());
  ir::Partition p = ir::partition(joint, t.num_args, t.num_results);
  std::string recomputed;
  for (uint32_t v : p.recomputed)
    for (const ir::Node& n : joint.nodes)
      if (n.result == v) recomputed += std::string(" ") + op_name(n.op);
  size_t saved = 0;
  for (const ir::SavedValue& s : p.saved) saved += s.kind == ir::SavedValue::Computed;
  std::string text = fmt::format(
      "// saved for backward: {} computed values, {} arguments and params\n"
      "// recomputed in backward:{}\n{}\n{}",
      saved, p.saved.size() - saved, recomputed.empty() ? " nothing" : recomputed, test::text_of(p.forward),
      test::text_of(p.backward));
  expect_golden_text(name + ".autodiff", text);
  for (const ir::Graph* g : {&p.forward, &p.backward}) {
    EXPECT_NO_THROW(ir::verify(*g));
    test::expect_round_trip(*g);
  }
}

template <class M> jit::ParamNames names_of(const M& m) {
  jit::ParamNames names;
  for (auto& [n, t] : m.named_parameters()) names.emplace_back(n, t);
  return names;
}

TEST(Golden, SoftmaxFromPrimitives) {
  expect_golden("softmax",
                [](std::span<const Tensor> in) {
                  Tensor e = exp(in[0] - amax(in[0], {-1}, true));
                  return std::vector<Tensor>{e / sum(e, {-1}, true)};
                },
                {randn({4, 8})});
}

TEST(Golden, LayerNormFromPrimitives) {
  Tensor weight = ones({8}), bias = zeros({8});
  expect_golden("layer_norm",
                [&](std::span<const Tensor> in) {
                  const Tensor& x = in[0];
                  Tensor centered = x - sum(x, {-1}, true) / 8.0;
                  Tensor variance = sum(centered * centered, {-1}, true) / 8.0;
                  return std::vector<Tensor>{centered * rsqrt(variance + 1e-5) * weight + bias};
                },
                {randn({4, 8})}, {{"weight", weight}, {"bias", bias}});
}

TEST(Golden, SoftmaxAutodiff) {
  expect_golden_autodiff("softmax",
                         [](std::span<const Tensor> in) {
                           Tensor e = exp(in[0] - amax(in[0], {-1}, true));
                           return std::vector<Tensor>{e / sum(e, {-1}, true)};
                         },
                         {randn({4, 8}).requires_grad_()});
}

TEST(Golden, LayerNormAutodiff) {
  Tensor weight = ones({8}).requires_grad_(), bias = zeros({8}).requires_grad_();
  expect_golden_autodiff("layer_norm",
                         [&](std::span<const Tensor> in) {
                           const Tensor& x = in[0];
                           Tensor centered = x - sum(x, {-1}, true) / 8.0;
                           Tensor variance = sum(centered * centered, {-1}, true) / 8.0;
                           return std::vector<Tensor>{centered * rsqrt(variance + 1e-5) * weight + bias};
                         },
                         {randn({4, 8}).requires_grad_()}, {{"weight", weight}, {"bias", bias}});
}

struct GoldenMlp : nn::Module {
  nn::Linear fc1{8, 16}, fc2{16, 4};
  GoldenMlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(relu(fc1(x))); }
};

TEST(Golden, MlpTrainingStep) {
  GoldenMlp net;
  optim::SGD opt(net.parameters(), 0.1);
  expect_golden(
      "mlp_train_step",
      [&](std::span<const Tensor> in) {
        opt.zero_grad();
        Tensor loss = cross_entropy(net(in[0]), in[1]);
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss};
      },
      {randn({4, 8}), randint(0, 4, {4})}, names_of(net));
}

// The MLP's loss with gelu: the backward recomputes gelu's pointwise inputs from the saved
// pre-activation rather than keeping them.
TEST(Golden, MlpLossAutodiff) {
  GoldenMlp net;
  expect_golden_autodiff(
      "mlp_loss",
      [&](std::span<const Tensor> in) {
        Tensor h = gelu(net.fc1(in[0]), "tanh");
        return std::vector<Tensor>{cross_entropy(net.fc2(h), in[1])};
      },
      {randn({4, 8}), randint(0, 4, {4})}, names_of(net));
}

using examples::DigitsNet;  // the digits demo's network

TEST(Golden, DigitsCnnForward) {
  DigitsNet net;
  Tensor x = randn({3, 1, 8, 8});
  jit::Function fast = jit::trace_module(net, x);
  test::expect_same(fast(x), net(x));
  expect_golden(
      "digits_forward", [&](std::span<const Tensor> in) { return std::vector<Tensor>{net(in[0])}; },
      {randn({2, 1, 8, 8})}, names_of(net));
}

TEST(Golden, DigitsCnnLossAutodiff) {
  DigitsNet net;
  expect_golden_autodiff(
      "digits_loss", [&](std::span<const Tensor> in) { return std::vector<Tensor>{cross_entropy(net(in[0]), in[1])}; },
      {randn({2, 1, 8, 8}), randint(0, 10, {2})}, names_of(net));
}

}  // namespace
}  // namespace kiln
