// examples/models/zoo.h -- every example model as a task, by name, at three sizes: Tiny (the
// tests' sizes, seconds on two cores), Bench (the benchmarks' sizes, examples/models/README.md)
// and Full (the published model: torchvision's widths, GNMT's 1024 units, for parameter counts).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "examples/models/gpt_task.h"
#include "examples/models/others.h"
#include "examples/models/vision.h"

namespace kiln::examples {

enum class Size { Tiny, Bench, Full };

inline const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"alexnet", "vgg19_bn", "resnet50", "mobilenet_v2",
                                                 "gnmt",    "ncf",      "gpt",      "unet"};
  return names;
}

/// The batch each model is benchmarked with at full size on a GPU (the table of
/// examples/models/README.md's GPU section, as the PyTorch peer runs them): images per step
/// for the vision models, sequences for the GPT (of 1024 tokens) and GNMT (of 50), pairs for NCF.
inline int64_t gpu_benchmark_batch(const std::string& name) {
  if (name == "alexnet") return 128;
  if (name == "ncf") return 65536;
  if (name == "gpt" || name == "unet") return 8;
  return 64;  // vgg19_bn, resnet50, mobilenet_v2, gnmt
}

/// The task `name` at `size` (batch: images, pairs or sequences per step; 0 for the size's own).
inline std::unique_ptr<Task> make_task(const std::string& name, Size size, int64_t batch = 0,
                                       const std::string& text = {}) {
  bool tiny = size == Size::Tiny, full = size == Size::Full;
  auto pick = [&](int64_t t, int64_t b, int64_t f) { return tiny ? t : full ? f : b; };
  // Tiny batches of 4: batch norm's statistics over 2 images would make the gradients
  // ill-conditioned (each normalized value near +-1 whatever the input).
  int64_t n = batch > 0 ? batch : pick(4, 8, 8);
  // Image models: width divisor and image side. AlexNet's strides need sides of 63 or more.
  auto image = [&](std::unique_ptr<ImageModel> m, int64_t classes, int64_t side) -> std::unique_ptr<Task> {
    return std::make_unique<ImageTask>(std::move(m), classes, n, side);
  };
  if (name == "alexnet")
    return image(std::make_unique<AlexNet>(pick(10, 100, 1000), pick(16, 4, 1)), pick(10, 100, 1000),
                 pick(63, 64, 224));
  if (name == "vgg19_bn")
    return image(std::make_unique<VGG19BN>(pick(10, 100, 1000), pick(16, 4, 1)), pick(10, 100, 1000),
                 pick(32, 32, 224));
  if (name == "resnet50")
    return image(std::make_unique<ResNet50>(pick(10, 100, 1000), pick(16, 1, 1)), pick(10, 100, 1000),
                 pick(64, 64, 224));
  if (name == "mobilenet_v2")
    return image(std::make_unique<MobileNetV2>(pick(10, 100, 1000), pick(4, 1, 1)), pick(10, 100, 1000),
                 pick(64, 64, 224));
  if (name == "unet")
    return std::make_unique<SegmentationTask>(2, pick(8, 16, 64), pick(2, 3, 4), n, pick(16, 64, 256));
  if (name == "ncf")
    return std::make_unique<NCFTask>(pick(100, 6040, 138493), pick(200, 3706, 26744),
                                     batch > 0 ? batch : pick(64, 1024, 1024));
  if (name == "gnmt")
    return std::make_unique<TranslationTask>(pick(32, 1000, 32000), pick(32, 256, 1024), pick(2, 2, 4), n,
                                             pick(6, 20, 50));
  if (name == "gpt") {
    GPTConfig c = tiny   ? GPTConfig{.vocab = 256, .context = 16, .embed = 32, .heads = 4, .layers = 2}
                  : full ? GPTConfig{.vocab = 50257, .context = 1024, .embed = 768, .heads = 12, .layers = 12}
                         : GPTConfig{};
    return std::make_unique<GPTTask>(c, batch > 0 ? batch : pick(2, 16, 8), text);
  }
  std::string known;
  for (const std::string& m : model_names()) known += (known.empty() ? "" : ", ") + m;
  throw Error("no example model '" + name + "' (the models: " + known + ")");
}

/// Each model's usual optimizer: SGD with momentum for the image models (as torchvision trains
/// them), Adam for NCF and GNMT, AdamW for the GPT; its learning rate times lr_scale.
inline std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name, Task& task, double lr_scale = 1) {
  std::vector<Tensor> params = task.model().parameters();
  if (name == "ncf" || name == "gnmt") return std::make_unique<optim::Adam>(params, 1e-3 * lr_scale);
  if (name == "gpt")
    return std::make_unique<optim::AdamW>(params, 3e-3 * lr_scale, optim::AdamWOptions{.weight_decay = 0.1});
  return std::make_unique<optim::SGD>(params, 0.01 * lr_scale,
                                      optim::SgdOptions{.momentum = 0.9, .weight_decay = 1e-4});
}

}  // namespace kiln::examples
