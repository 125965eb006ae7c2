// examples/models/vision.h -- the image classifiers of the PyTorch paper's benchmarks, as
// torchvision defines them (layer for layer, the same names in state_dict, the same
// initialization), each with a `width` divisor for small runs (1: torchvision's model):
// AlexNet, VGG-19 with batch norm, ResNet-50 and MobileNetV2. ImageTask trains any of them on
// synthetic images.
#pragma once

#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "examples/models/train.h"

namespace kiln::examples {

/// A model that classifies images [N,3,H,W] into logits [N,classes].
class ImageModel : public nn::UnaryModule {};

inline int64_t scaled(int64_t channels, int64_t width) { return std::max<int64_t>(channels / width, 1); }
/// A square window, stride or padding.
inline Dims sq(int64_t k) { return {k, k}; }

/// torchvision's initialization of a convolutional classifier: kaiming normal (fan_out) for
/// convolutions, N(0, 0.01) for linear layers, zero biases, batch norm 1 and 0.
inline void init_classifier(nn::Module& m) {
  NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters()) {
    if (name.ends_with(".bias")) nn::zeros_(p);
    else if (p.dim() == 4) nn::kaiming_normal_(p, 0, "fan_out");
    else if (p.dim() == 2) nn::normal_(p, 0, 0.01);
    else if (p.dim() == 1) nn::ones_(p);  // a batch norm's weight
  }
}

// ---- AlexNet (torchvision.models.alexnet) ---------------------------------------------------
class AlexNet : public ImageModel {
 public:
  explicit AlexNet(int64_t classes = 1000, int64_t width = 1, double dropout = 0.5) {
    auto c = [width](int64_t n) { return scaled(n, width); };
    features.add<nn::Conv2d>(3, c(64), sq(11), nn::Conv2dOptions{.stride = sq(4), .padding = sq(2)});
    features.add<nn::ReLU>();
    features.add<nn::MaxPool2d>(sq(3), sq(2));
    features.add<nn::Conv2d>(c(64), c(192), sq(5), nn::Conv2dOptions{.padding = sq(2)});
    features.add<nn::ReLU>();
    features.add<nn::MaxPool2d>(sq(3), sq(2));
    features.add<nn::Conv2d>(c(192), c(384), sq(3), nn::Conv2dOptions{.padding = sq(1)});
    features.add<nn::ReLU>();
    features.add<nn::Conv2d>(c(384), c(256), sq(3), nn::Conv2dOptions{.padding = sq(1)});
    features.add<nn::ReLU>();
    features.add<nn::Conv2d>(c(256), c(256), sq(3), nn::Conv2dOptions{.padding = sq(1)});
    features.add<nn::ReLU>();
    features.add<nn::MaxPool2d>(sq(3), sq(2));
    classifier.add<nn::Dropout>(dropout);
    classifier.add<nn::Linear>(c(256) * 36, c(4096));
    classifier.add<nn::ReLU>();
    classifier.add<nn::Dropout>(dropout);
    classifier.add<nn::Linear>(c(4096), c(4096));
    classifier.add<nn::ReLU>();
    classifier.add<nn::Linear>(c(4096), classes);
    register_module("features", features);
    register_module("avgpool", avgpool);
    register_module("classifier", classifier);
  }
  Tensor forward(const Tensor& x) override { return classifier(avgpool(features(x)).flatten(1)); }
  nn::Sequential features;
  nn::AdaptiveAvgPool2d avgpool{{6, 6}};
  nn::Sequential classifier;
};

// ---- VGG-19 with batch norm (torchvision.models.vgg19_bn) -----------------------------------
class VGG19BN : public ImageModel {
 public:
  explicit VGG19BN(int64_t classes = 1000, int64_t width = 1, double dropout = 0.5) {
    const int64_t M = 0;  // a max pool
    const int64_t config[] = {64,  64,  M,   128, 128, M,   256, 256, 256, 256, M,
                              512, 512, 512, 512, M,   512, 512, 512, 512, M};
    int64_t in = 3;
    for (int64_t v : config) {
      if (v == M) {
        features.add<nn::MaxPool2d>(sq(2), sq(2));
        continue;
      }
      int64_t out = scaled(v, width);
      features.add<nn::Conv2d>(in, out, sq(3), nn::Conv2dOptions{.padding = sq(1)});
      features.add<nn::BatchNorm2d>(out);
      features.add<nn::ReLU>();
      in = out;
    }
    classifier.add<nn::Linear>(in * 49, scaled(4096, width));
    classifier.add<nn::ReLU>();
    classifier.add<nn::Dropout>(dropout);
    classifier.add<nn::Linear>(scaled(4096, width), scaled(4096, width));
    classifier.add<nn::ReLU>();
    classifier.add<nn::Dropout>(dropout);
    classifier.add<nn::Linear>(scaled(4096, width), classes);
    register_module("features", features);
    register_module("avgpool", avgpool);
    register_module("classifier", classifier);
    init_classifier(*this);
  }
  Tensor forward(const Tensor& x) override { return classifier(avgpool(features(x)).flatten(1)); }
  nn::Sequential features;
  nn::AdaptiveAvgPool2d avgpool{{7, 7}};
  nn::Sequential classifier;
};

// ---- ResNet-50 (torchvision.models.resnet50) ------------------------------------------------
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride)
      : conv1(in, planes, sq(1), {.bias = false}),
        bn1(planes),
        conv2(planes, planes, sq(3), {.stride = sq(stride), .padding = sq(1), .bias = false}),
        bn2(planes),
        conv3(planes, planes * kExpansion, sq(1), {.bias = false}),
        bn3(planes * kExpansion) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    register_module("conv3", conv3);
    register_module("bn3", bn3);
    if (stride != 1 || in != planes * kExpansion) {
      downsample.add<nn::Conv2d>(in, planes * kExpansion, sq(1),
                                 nn::Conv2dOptions{.stride = sq(stride), .bias = false});
      downsample.add<nn::BatchNorm2d>(planes * kExpansion);
      register_module("downsample", downsample);
    }
  }
  Tensor operator()(const Tensor& x) {
    Tensor out = relu(bn1(conv1(x)));
    out = relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return relu(out + (downsample.size() ? downsample(x) : x));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d conv3;
  nn::BatchNorm2d bn3;
  nn::Sequential downsample;
};

class ResNet50 : public ImageModel {
 public:
  explicit ResNet50(int64_t classes = 1000, int64_t width = 1)
      : conv1(3, scaled(64, width), sq(7), {.stride = sq(2), .padding = sq(3), .bias = false}), bn1(scaled(64, width)) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("maxpool", maxpool);
    int64_t in = scaled(64, width);
    const int64_t blocks[] = {3, 4, 6, 3};
    for (int64_t l = 0; l < 4; ++l) {
      int64_t planes = scaled(64 << l, width);
      for (int64_t b = 0; b < blocks[l]; ++b) {
        layers[l].add<Bottleneck>(in, planes, b == 0 && l > 0 ? 2 : 1);
        in = planes * Bottleneck::kExpansion;
      }
      register_module("layer" + std::to_string(l + 1), layers[l]);
    }
    register_module("avgpool", avgpool);
    fc = std::make_unique<nn::Linear>(in, classes);
    register_module("fc", *fc);
    NoGradGuard no_grad;
    for (auto& [name, p] : named_parameters())
      if (p.dim() == 4) nn::kaiming_normal_(p, 0, "fan_out");
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = maxpool(relu(bn1(conv1(x))));
    for (nn::ModuleList& layer : layers)
      for (size_t b = 0; b < layer.size(); ++b) h = layer.at<Bottleneck>(b)(h);
    return (*fc)(avgpool(h).flatten(1));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::MaxPool2d maxpool{sq(3), sq(2), sq(1)};
  nn::ModuleList layers[4];
  nn::AdaptiveAvgPool2d avgpool{{1, 1}};
  std::unique_ptr<nn::Linear> fc;
};

// ---- MobileNetV2 (torchvision.models.mobilenet_v2) ------------------------------------------
/// Conv2d, BatchNorm2d and ReLU6 (torchvision's Conv2dNormActivation).
inline std::shared_ptr<nn::Sequential> conv_bn_relu6(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                                     int64_t groups = 1) {
  auto s = std::make_shared<nn::Sequential>();
  s->add<nn::Conv2d>(
      in, out, sq(kernel),
      nn::Conv2dOptions{.stride = sq(stride), .padding = sq((kernel - 1) / 2), .groups = groups, .bias = false});
  s->add<nn::BatchNorm2d>(out);
  s->add<nn::ReLU6>();
  return s;
}

class InvertedResidual : public nn::UnaryModule {
 public:
  InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand) : residual_(stride == 1 && in == out) {
    int64_t hidden = in * expand;
    if (expand != 1) conv.push_back(conv_bn_relu6(in, hidden, 1, 1));
    conv.push_back(conv_bn_relu6(hidden, hidden, 3, stride, hidden));            // depthwise
    conv.add<nn::Conv2d>(hidden, out, sq(1), nn::Conv2dOptions{.bias = false});  // linear bottleneck
    conv.add<nn::BatchNorm2d>(out);
    register_module("conv", conv);
  }
  Tensor forward(const Tensor& x) override { return residual_ ? x + conv(x) : conv(x); }
  nn::Sequential conv;

 private:
  bool residual_;
};

class MobileNetV2 : public ImageModel {
 public:
  explicit MobileNetV2(int64_t classes = 1000, int64_t width = 1, double dropout = 0.2) {
    // (expansion, channels, repeats, first stride), torchvision's table.
    const int64_t table[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    int64_t in = scaled(32, width), last = scaled(1280, width);
    features.push_back(conv_bn_relu6(3, in, 3, 2));
    for (const auto& row : table) {
      int64_t out = scaled(row[1], width);
      for (int64_t i = 0; i < row[2]; ++i) {
        features.add<InvertedResidual>(in, out, i == 0 ? row[3] : 1, row[0]);
        in = out;
      }
    }
    features.push_back(conv_bn_relu6(in, last, 1, 1));
    classifier.add<nn::Dropout>(dropout);
    classifier.add<nn::Linear>(last, classes);
    register_module("features", features);
    register_module("classifier", classifier);
    init_classifier(*this);
  }
  Tensor forward(const Tensor& x) override { return classifier(mean(features(x), {2, 3})); }
  nn::Sequential features;
  nn::Sequential classifier;
};

/// Any of the above on synthetic images [batch,3,size,size] with labels: a few fixed batches,
/// cycled, so that the loss falls as the model learns them.
class ImageTask : public Task {
 public:
  ImageTask(std::unique_ptr<ImageModel> model, int64_t classes, int64_t batch, int64_t size, int64_t distinct = 4)
      : net(std::move(model)) {
    for (int64_t i = 0; i < distinct; ++i)
      batches_.push_back({randn({batch, 3, size, size}), randint(0, classes, {batch})});
  }
  nn::Module& model() override { return *net; }
  std::vector<Tensor> batch(int64_t step) override { return batches_[static_cast<size_t>(step) % batches_.size()]; }
  Tensor loss(std::span<const Tensor> b) override { return cross_entropy((*net)(b[0]), b[1]); }
  std::vector<Tensor> forward(std::span<const Tensor> in) override { return {(*net)(in[0])}; }
  std::unique_ptr<ImageModel> net;

 private:
  std::vector<std::vector<Tensor>> batches_;
};

}  // namespace kiln::examples
