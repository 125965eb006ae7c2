// tests/models/models_test.cpp -- each example model (examples/models/zoo.h, at its tiny size):
// a traced whole training step trains as the eager step does (losses over 3 steps, the first
// step's gradients, the buffers batch norm updates), and its saved forward, loaded in another
// process, gives the original's outputs.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "examples/models/zoo.h"
#include "runtime/files.h"
#include "tests/jit/jit_test_util.h"

namespace kiln {
namespace {

using examples::make_task;
using examples::model_names;
using examples::Size;
using examples::Task;

class Model : public testing::TestWithParam<std::string> {};

// Within rounding for a tensor computed by long sums: |a - b| <= 1e-3 max|b| elementwise. The
// rounding error of a sum scales with its terms, not with its result, so an element that
// cancels to near zero may differ more than 1e-4 of itself; through 50 layers of batch norm's
// backward (each dividing by a standard deviation over 16 values) fused kernels' reassociated
// sums give differences near 1e-4 of the largest gradient (op by op, KILN_FUSION=0, the traced
// step is bit-identical to eager).
void expect_close_to_scale(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.type().str(), want.type().str());
  double scale = amax(abs(want.to(DType::F64))).item<double>();
  double diff = amax(abs(got.to(DType::F64) - want.to(DType::F64))).item<double>();
  EXPECT_LE(diff, 1e-3 * scale + 1e-5) << "largest difference " << diff << ", largest value " << scale;
}

TEST_P(Model, TracedStepsTrainAsEagerOnesDo) {
  const std::string& name = GetParam();
  manual_seed(11);
  std::unique_ptr<Task> eager = make_task(name, Size::Tiny), traced = make_task(name, Size::Tiny);
  traced->model().load_state_dict(eager->model().state_dict());
  // In f64: a tiny model amplifies rounding (ReLU6's and max pooling's kinks flip with it, and
  // batch norm divides by deviations over few values), so in f32 the fused kernels'
  // reassociated sums moved MobileNetV2's first gradients by 2% on an AVX2 machine. In f64
  // rounding is 1e-16 and the bounds below stay far above it, while a wrong formula still
  // moves results by far more (f32's fused kernels are checked op by op in tests/every_op).
  eager->model().to(DType::F64);
  traced->model().to(DType::F64);
  // Steps of a thousandth of the usual size. A tiny ResNet-50 at initialization is sharp (its
  // gradient's squared norm is over 10^3, so a step of 10^-4 moves the loss by 0.1): at the
  // usual size, the rounding differences of the first step's gradients (1e-4 of their scale)
  // grow past any bound within three steps. Small steps still move the loss by far more than
  // the tolerance, so an update computed wrongly is seen.
  std::unique_ptr<optim::Optimizer> eager_opt = examples::make_optimizer(name, *eager, 1e-3);
  std::unique_ptr<optim::Optimizer> traced_opt = examples::make_optimizer(name, *traced, 1e-3);
  std::vector<std::vector<Tensor>> batches;
  for (int i = 0; i < 3; ++i) {
    batches.push_back(eager->batch(i));
    for (Tensor& t : batches.back())
      if (is_float(t.dtype())) t = t.to(DType::F64);
  }
  jit::Function step =
      jit::trace_tensors([&](std::span<const Tensor> b) { return examples::train_step(*traced, *traced_opt, b); },
                         batches[0], name + "_step");
  for (size_t i = 0; i < batches.size(); ++i) {
    SCOPED_TRACE(fmt::format("step {}", i));
    manual_seed(100 + i);  // the same dropout masks in both
    Tensor want = examples::train_step(*eager, *eager_opt, batches[i])[0];
    manual_seed(100 + i);
    Tensor got = step.call(batches[i])[0];
    EXPECT_TRUE(test::close_enough(got, want)) << got.item<double>() << " vs " << want.item<double>();
    if (i > 0) continue;
    auto ep = eager->model().named_parameters(), tp = traced->model().named_parameters();
    ASSERT_EQ(ep.size(), tp.size());
    for (size_t k = 0; k < ep.size(); ++k) {
      SCOPED_TRACE(ep[k].first);
      ASSERT_TRUE(tp[k].second.grad().defined());
      expect_close_to_scale(tp[k].second.grad(), ep[k].second.grad());
    }
  }
  // The running statistics batch norm keeps (its parameters after 3 updates are not compared:
  // Adam turns a gradient that is zero up to rounding into a step of either sign).
  std::map<std::string, Tensor> want = eager->model().state_dict();
  for (auto& [key, t] : traced->model().named_buffers()) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(test::close_enough(t, want.at(key)));
  }
}

std::string child_dir() {
  const char* d = std::getenv("KILN_MODELS_CHILD");
  return d ? d : "";
}

// Run by SavedForwardsLoadInAnotherProcess in its child: loads every model's file and writes
// what the loaded forward gives on the parent's inputs.
TEST(ModelsChild, DISABLED_LoadsAndRunsWhatTheParentSaved) {
  std::string dir = child_dir();
  ASSERT_FALSE(dir.empty()) << "run by SavedForwardsLoadInAnotherProcess, with KILN_MODELS_CHILD set";
  NoGradGuard no_grad;
  for (const std::string& name : model_names()) {
    jit::LoadedFunction f = jit::load(fmt::format("{}/{}.kiln", dir, name));
    std::vector<Tensor> in;
    for (size_t i = 0; i < f.inputs().size(); ++i) in.push_back(load_npy(fmt::format("{}/{}_in{}.npy", dir, name, i)));
    save_npy(f.call(in)[0], fmt::format("{}/{}_got.npy", dir, name));
  }
}

TEST(Models, SavedForwardsLoadInAnotherProcess) {
  if (!child_dir().empty()) GTEST_SKIP() << "the child's side is ModelsChild";
  std::string dir = (std::filesystem::temp_directory_path() / fmt::format("kiln_models_test_{}", ::getpid())).string();
  std::filesystem::create_directories(dir);
  std::map<std::string, Tensor> want;
  for (const std::string& name : model_names()) {
    SCOPED_TRACE(name);
    manual_seed(12);
    std::unique_ptr<Task> task = make_task(name, Size::Tiny);
    std::unique_ptr<optim::Optimizer> opt = examples::make_optimizer(name, *task);
    examples::train(*task, *opt, {.steps = 2});  // trained a little: running statistics move
    std::vector<Tensor> batch = task->batch(0);
    jit::SaveOptions options;
    if (name == "gpt") options.dynamic(0, 0, "B").dynamic(0, 1, "T");
    else
      for (size_t i = 0; i < task->forward_arity(); ++i) options.dynamic(i, 0, "N");
    examples::save_forward(*task, batch, fmt::format("{}/{}.kiln", dir, name), options);
    // Another batch size than the example's (and for the GPT another length too).
    std::vector<Tensor> in;
    for (size_t i = 0; i < task->forward_arity(); ++i) {
      Tensor x = batch[i];
      in.push_back(name == "gpt" ? x.slice(1, 0, x.shape()[1] - 3).slice(0, 0, 1).contiguous()
                                 : cat({x, x.slice(0, 0, 1)}, 0));
      save_npy(in.back(), fmt::format("{}/{}_in{}.npy", dir, name, i));
    }
    task->model().eval();
    NoGradGuard no_grad;
    want[name] = task->forward(in)[0];
  }
  std::optional<std::string> out = files::run_program(
      {fmt::format("/proc/{}/exe", ::getpid()), "--gtest_also_run_disabled_tests", "--gtest_filter=ModelsChild.*"},
      {"KILN_MODELS_CHILD=" + dir});
  ASSERT_TRUE(out.has_value()) << "the child process failed";
  for (const std::string& name : model_names()) {
    SCOPED_TRACE(name);
    test::expect_same(load_npy(fmt::format("{}/{}_got.npy", dir, name)), want[name]);
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Examples, Model, testing::ValuesIn(model_names()),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace kiln
