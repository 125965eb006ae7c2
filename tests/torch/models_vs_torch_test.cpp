// tests/torch/models_vs_torch_test.cpp -- the example models (examples/models) beside the same
// models written with LibTorch's modules, parameter for parameter under the same names: kiln's
// weights copied in, one forward (the loss) and one backward (every parameter's gradient) on
// the same batch, in training mode (batch statistics; dropout 0 so both draw nothing). The loss
// within 1e-4 relative; each gradient within 1e-4 of its largest element (the rounding of a sum
// scales with its terms, and the two libraries sum convolutions and GEMMs in other orders).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>

#include "examples/models/zoo.h"
#include "tests/torch/torch_models.h"
#include "tests/torch/torch_util.h"

namespace {

using namespace kiln::test_torch;
using namespace kiln::torch_models;

// ---- the comparison ---------------------------------------------------------------------------

// kiln's parameters and buffers into the torch model's, by name (names torch lacks, as the tied
// head.weight, are skipped).
void copy_weights(kiln::nn::Module& k, tnn::Module& t) {
  torch::NoGradGuard no_grad;
  auto params = t.named_parameters(), buffers = t.named_buffers();
  size_t copied = 0;
  for (auto& [name, v] : k.state_dict()) {
    TTensor* dst = params.find(name) ? params.find(name) : buffers.find(name);
    if (!dst) continue;
    ASSERT_EQ(dst->sizes().vec(), sizes(v)) << name;
    dst->copy_(to_torch(v).to(dst->dtype()));
    ++copied;
  }
  EXPECT_EQ(copied, params.size() + buffers.size()) << "every torch tensor has a kiln counterpart";
}

void expect_close_to_scale(const KTensor& got, const TTensor& want, const std::string& name) {
  ASSERT_EQ(sizes(got), want.sizes().vec()) << name;
  std::vector<double> g = got.to_vector<double>(), w = values(want);
  double scale = 0, diff = 0;
  for (size_t i = 0; i < g.size(); ++i)
    scale = std::max(scale, std::abs(w[i])), diff = std::max(diff, std::abs(g[i] - w[i]));
  EXPECT_LE(diff, 1e-4 * scale + 1e-6) << name << ": largest difference " << diff << ", largest gradient " << scale;
}

// Loss and gradients of kiln's model (through `task`'s loss) and torch's on one batch.
void compare(ex::Task& task, tnn::Module& t, const std::vector<KTensor>& batch,
             const std::function<TTensor(const std::vector<TTensor>&)>& torch_loss) {
  copy_weights(task.model(), t);
  task.model().train();
  t.train();
  KTensor kl = task.loss(batch);
  kl.backward();
  std::vector<TTensor> tb;
  for (const KTensor& x : batch) tb.push_back(to_torch(x));
  TTensor tl = torch_loss(tb);
  tl.backward();
  expect_same(kl, tl);
  auto tp = t.named_parameters();
  for (auto& [name, p] : task.model().named_parameters()) {
    const TTensor* q = tp.find(name);
    ASSERT_TRUE(q) << name;
    ASSERT_TRUE(p.grad().defined()) << name;
    expect_close_to_scale(p.grad(), q->grad(), name);
  }
  // Batch norm's running statistics, updated by the same forward.
  for (auto& [name, b] : task.model().named_buffers())
    if (const TTensor* q = t.named_buffers().find(name)) expect_same(b, *q);
}

TEST(ModelsVsTorch, AlexNet) {
  kiln::manual_seed(1);
  ex::ImageTask task(std::make_unique<ex::AlexNet>(10, 16, 0.0), 10, 4, 63);
  TAlexNet t(10, 16);
  compare(task, t, task.batch(0),
          [&](const std::vector<TTensor>& b) { return F::cross_entropy(t.forward(b[0]), b[1]); });
}

TEST(ModelsVsTorch, VGG19BN) {
  kiln::manual_seed(2);
  ex::ImageTask task(std::make_unique<ex::VGG19BN>(10, 16, 0.0), 10, 4, 32);
  TVGG19BN t(10, 16);
  compare(task, t, task.batch(0),
          [&](const std::vector<TTensor>& b) { return F::cross_entropy(t.forward(b[0]), b[1]); });
}

TEST(ModelsVsTorch, ResNet50) {
  kiln::manual_seed(3);
  // Batch 8: the last stage's batch norm then sees 32 values per channel, not 16, and its
  // backward divides the two libraries' rounding by a better-determined deviation.
  ex::ImageTask task(std::make_unique<ex::ResNet50>(10, 16), 10, 8, 64);
  TResNet50 t(10, 16);
  compare(task, t, task.batch(0),
          [&](const std::vector<TTensor>& b) { return F::cross_entropy(t.forward(b[0]), b[1]); });
}

TEST(ModelsVsTorch, MobileNetV2) {
  kiln::manual_seed(4);
  ex::ImageTask task(std::make_unique<ex::MobileNetV2>(10, 4, 0.0), 10, 4, 64);
  TMobileNetV2 t(10, 4);
  compare(task, t, task.batch(0),
          [&](const std::vector<TTensor>& b) { return F::cross_entropy(t.forward(b[0]), b[1]); });
}

TEST(ModelsVsTorch, UNet) {
  kiln::manual_seed(5);
  ex::SegmentationTask task(2, 8, 2, 4, 16);
  TUNet t(2, 8, 2);
  compare(task, t, task.batch(0),
          [&](const std::vector<TTensor>& b) { return F::cross_entropy(t.forward(b[0]), b[1]); });
}

TEST(ModelsVsTorch, NCF) {
  kiln::manual_seed(6);
  ex::NCFTask task(100, 200, 64);
  TNCF t(100, 200);
  compare(task, t, task.batch(0), [&](const std::vector<TTensor>& b) {
    return F::binary_cross_entropy_with_logits(t.forward(b[0], b[1]), b[2]);
  });
}

TEST(ModelsVsTorch, GNMT) {
  kiln::manual_seed(7);
  ex::TranslationTask task(32, 32, 2, 4, 6, 4, /*dropout=*/0.0);
  TGNMT t(32, 32, 2);
  compare(task, t, task.batch(0), [&](const std::vector<TTensor>& b) {
    return F::cross_entropy(t.forward(b[0], b[1]).reshape({-1, 32}), b[2].reshape({-1}));
  });
}

TEST(ModelsVsTorch, GPT) {
  kiln::manual_seed(8);
  ex::GPTConfig c{.vocab = 256, .context = 16, .embed = 32, .heads = 4, .layers = 2, .dropout = 0.0};
  ex::GPTTask task(c, 3);
  TGPT t(c);
  compare(task, t, task.batch(0), [&](const std::vector<TTensor>& b) {
    return F::cross_entropy(t.forward(b[0]).reshape({-1, 256}), b[1].reshape({-1}));
  });
}

}  // namespace
