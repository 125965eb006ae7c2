// tests/jit/compat_test.cpp -- saved modules of every format version keep loading: each file
// in tests/compat (v<format>_<name>.kiln) is loaded and run on the inputs stored beside it
// (<stem>.in<k>.npy), and must give the outputs stored there (<stem>.out<k>.npy). A training
// step's file is run once after restoring its generator state, and its first parameter after
// the update is an output too.
//
// A new format version adds its files (old ones are never rewritten):
//   build/tests/kiln_jit_tests --gtest_also_run_disabled_tests
//                              --gtest_filter=Compat.DISABLED_WriteTheCurrentFormatsFiles
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "jit/module_file.h"
#include "jit/save.h"
#include "jit_test_util.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "runtime/api.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
const fs::path kDir = KILN_COMPAT_DIR;

struct Small : nn::Module {
  nn::Conv2d conv{1, 4, {3, 3}, {.padding = {1, 1}}};
  nn::Linear fc{4 * 6 * 6, 3};
  double p = 0.2;
  Small() {
    register_module("conv", conv);
    register_module("fc", fc);
  }
  Tensor operator()(const Tensor& x) {
    Tensor h = max_pool2d(relu(conv(x)), {2, 2});
    return fc(nn::dropout(h.reshape({h.shape()[0], -1}), p, is_training()));
  }
};

std::vector<Tensor> run_case(const jit::LoadedFunction& f, const std::vector<Tensor>& in) {
  f.restore_random_state();
  std::vector<Tensor> out = f.call(in);
  if (f.info().training_step) out.push_back(f.named_parameters().front().second.clone());
  return out;
}

void write_case(const std::string& stem, const std::vector<Tensor>& in) {
  jit::LoadedFunction f = jit::load((kDir / (stem + ".kiln")).string());
  for (size_t k = 0; k < in.size(); ++k) save_npy(in[k], (kDir / fmt::format("{}.in{}.npy", stem, k)).string());
  std::vector<Tensor> out = run_case(f, in);
  for (size_t k = 0; k < out.size(); ++k) save_npy(out[k], (kDir / fmt::format("{}.out{}.npy", stem, k)).string());
}

// Disabled: run by hand when the format version changes (see the top of this file).
TEST(Compat, DISABLED_WriteTheCurrentFormatsFiles) {
  std::string v = fmt::format("v{}_", jit::kModuleFormat);
  ASSERT_FALSE(fs::exists(kDir / (v + "forward.kiln")))
      << "format " << jit::kModuleFormat << "'s files exist: never rewrite them";
  manual_seed(11);
  Small net;
  {
    net.eval();
    NoGradGuard no_grad;
    jit::save_module(net, randn({4, 1, 12, 12}), (kDir / (v + "forward.kiln")).string(),
                     jit::SaveOptions().dynamic(0, 0, "B"));
  }
  write_case(v + "forward", {randn({3, 1, 12, 12})});
  net.train();
  optim::SGD opt(net.parameters(), 0.1);
  Tensor x = randn({4, 1, 12, 12}), y = randint(0, 3, {4});
  jit::Function step = jit::trace([&](Tensor a, Tensor b) { return test::train_step(net, opt, a, b); }, {x, y});
  step(x, y);
  jit::SaveOptions o;
  o.parameter_names = net.named_parameters();
  jit::save(step, (kDir / (v + "step.kiln")).string(), o);
  write_case(v + "step", {x, y});
}

TEST(Compat, EveryFormatVersionsFilesLoadAndGiveTheirResults) {
  int cases = 0;
  for (const auto& e : fs::directory_iterator(kDir)) {
    if (e.path().extension() != ".kiln") continue;
    std::string stem = e.path().stem().string();
    SCOPED_TRACE(stem);
    jit::LoadedFunction f = jit::load(e.path().string());
    std::vector<Tensor> in, want;
    for (size_t k = 0; fs::exists(kDir / fmt::format("{}.in{}.npy", stem, k)); ++k)
      in.push_back(load_npy((kDir / fmt::format("{}.in{}.npy", stem, k)).string()));
    for (size_t k = 0; fs::exists(kDir / fmt::format("{}.out{}.npy", stem, k)); ++k)
      want.push_back(load_npy((kDir / fmt::format("{}.out{}.npy", stem, k)).string()));
    ASSERT_FALSE(in.empty());
    std::vector<Tensor> got = run_case(f, in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(test::close_enough(got[k], want[k])) << "output " << k;
    ++cases;
  }
  EXPECT_GE(cases, 2) << "tests/compat holds the files of every format version";
}

}  // namespace
}  // namespace kiln
