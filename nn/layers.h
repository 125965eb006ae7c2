// nn/layers.h -- the standard layers, initialized as PyTorch initializes them.
#pragma once

#include <optional>
#include <string>

#include "nn/module.h"
#include "runtime/api.h"

namespace kiln::nn {

// ---- functional forms (torch.nn.functional) ---------------------------------------------------
Tensor relu6(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor mish(const Tensor& x);
/// Batch norm over the channel dim 1 of x [N, C, ...]. Training: batch statistics (biased
/// variance), and running_mean/var (when given) updated in place with `momentum` (the variance
/// unbiased); else the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5);
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);

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

class ReLU6 : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
};
class Hardswish : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
};
class LeakyReLU : public UnaryModule {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;

 private:
  double slope_;
};
class Softplus : public UnaryModule {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta_(beta), threshold_(threshold) {}
  Tensor forward(const Tensor& x) override;

 private:
  double beta_, threshold_;
};
class Mish : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
};

struct BatchNormOptions {
  double eps = 1e-5;
  /// The running statistics' update weight; none: the cumulative average over the batches seen.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // weight (1) and bias (0) parameters
  bool track_running_stats = true;  // running_mean, running_var, num_batches_tracked buffers
};
/// Batch normalization over the channel dim 1 (torch.nn.BatchNorm1d/2d): batch statistics in
/// train() (updating the running ones, whose variance is unbiased), running statistics in
/// eval(), batch statistics always without running ones.
class BatchNorm : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  BatchNormOptions options;

 protected:
  BatchNorm(int64_t num_features, BatchNormOptions options, int64_t min_rank, int64_t max_rank, const char* name);

 private:
  int64_t min_rank_, max_rank_;
  const char* name_;
};
/// Over [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, options, 2, 3, "BatchNorm1d") {}
};
/// Over [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, options, 4, 4, "BatchNorm2d") {}
};
/// Normalizes each of num_groups channel groups of each sample (torch.nn.GroupNorm).
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override { return group_norm(x, num_groups_, weight, bias, eps_); }
  Tensor weight, bias;

 private:
  int64_t num_groups_;
  double eps_;
};
/// x / sqrt(mean(x^2) + eps) over the trailing `shape` dims, times weight (torch.nn.RMSNorm);
/// eps by default the dtype's machine epsilon.
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(Dims shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override { return rms_norm(x, shape_, weight, eps_); }
  Tensor weight;

 private:
  Dims shape_;
  std::optional<double> eps_;
};

/// dropout(x): functional form; identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace kiln::nn
