// nn/layers.h -- the standard layers, initialized as PyTorch initializes them.
#pragma once

#include <string>

#include "nn/module.h"
#include "runtime/api.h"

namespace kiln::nn {

/// y = x W^T + b, W [out, in]; kaiming-uniform init (bound 1/sqrt(in)), as torch.nn.Linear.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override { return linear(x, weight, bias); }
  Tensor weight, bias;
};

struct Conv2dOptions {
  Dims stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};
/// 2-d convolution over [N, C, H, W]; weight [out, in/groups, kh, kw].
class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Dims kernel, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  Conv2dOptions options;
};

class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Dims kernel, Dims stride = {}, Dims padding = {0, 0}, bool ceil_mode = false)
      : kernel_(kernel), stride_(stride), padding_(padding), ceil_mode_(ceil_mode) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_, ceil_mode_); }

 private:
  Dims kernel_, stride_, padding_;
  bool ceil_mode_;
};

class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Dims kernel, Dims stride = {}, Dims padding = {0, 0}, bool count_include_pad = true)
      : kernel_(kernel), stride_(stride), padding_(padding), include_pad_(count_include_pad) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_, padding_, include_pad_); }

 private:
  Dims kernel_, stride_, padding_;
  bool include_pad_;
};

/// Rows of a [num, dim] table picked by integer indices; normal(0, 1) init.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override { return embedding(indices, weight); }
  Tensor weight;
};

/// Normalizes over the trailing `shape` dims; weight 1 and bias 0 when elementwise_affine.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Dims shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override { return layer_norm(x, shape_, weight, bias, eps_); }
  Tensor weight, bias;

 private:
  Dims shape_;
  double eps_;
};

/// Zeroes each element with probability p while training, scaling the rest by 1/(1-p).
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
};

/// Flattens dims [start, end] (by default all but the batch dim).
class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : start_(start), end_(end) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }

 private:
  int64_t start_, end_;
};

class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};
class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none") : approximate_(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }

 private:
  std::string approximate_;
};
class SiLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
};
class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};
class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

/// dropout(x): functional form; identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace kiln::nn
