// nn/layers.h -- the standard layers, initialized as PyTorch initializes them.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

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

/// Rows of a [num, dim] table picked by integer indices; normal(0, 1) init. With padding_idx
/// (negative counts from the end), that row starts at zero and gets no gradient, as torch's.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& indices) override;
  Tensor weight;

 private:
  std::optional<int64_t> padding_idx_;
};
/// embedding(indices, weight) where no gradient reaches row padding_idx (torch's
/// F.embedding(..., padding_idx)).
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx);

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

struct InterpolateOptions {
  Dims size{};                         // the output's H, W; or
  std::vector<double> scale_factor{};  // H and W multiplied by these (floored)
  std::string mode = "nearest";        // or "bilinear"
  bool align_corners = false;          // bilinear: corners' centers map onto each other
};
/// Resizes the H, W of x [N, C, H, W] (torch.nn.functional.interpolate, nearest and bilinear,
/// with torch's source indices).
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
/// Averages over windows [floor(i H / oh), ceil((i + 1) H / oh)) and likewise along W, so the
/// output is output_size (torch's adaptive_avg_pool2d).
Tensor adaptive_avg_pool2d(const Tensor& x, const Dims& output_size);
/// The transposed convolution (conv2d's input gradient): weight [in, out/groups, kh, kw]; the
/// output is (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1 high.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const Dims& stride = {1, 1},
                        const Dims& padding = {0, 0}, const Dims& output_padding = {0, 0}, int64_t groups = 1,
                        const Dims& dilation = {1, 1});

class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Dims output_size) : size_(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, size_); }

 private:
  Dims size_;
};
class Upsample : public UnaryModule {
 public:
  explicit Upsample(InterpolateOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options_); }

 private:
  InterpolateOptions options_;
};
struct ConvTranspose2dOptions {
  Dims stride{1, 1}, padding{0, 0}, output_padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};
/// torch.nn.ConvTranspose2d: weight [in, out/groups, kh, kw], torch's initialization.
class ConvTranspose2d : public UnaryModule {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Dims kernel, ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ConvTranspose2dOptions options;
};

/// softmax(q k^T scale + mask) v over the last two dims (torch's scaled_dot_product_attention):
/// scale 1/sqrt(E) by default; a bool attn_mask is true where attention is allowed, a float one
/// is added; is_causal masks keys after each query; dropout whenever dropout_p > 0. Runs as one
/// fused op (runtime/ops/attention.h) whose memory is linear in the sequence: a flash-attention
/// kernel on CUDA, a blocked kernel on the CPU; a row whose keys are all masked gives NaN.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

struct MultiheadAttentionOptions {
  double dropout = 0.0;      // on the attention weights, in train()
  bool bias = true;          // in_proj_bias and out_proj.bias
  bool batch_first = false;  // [N, L, E] instead of torch's default [L, N, E]
};
/// torch.nn.MultiheadAttention with its parameter names (in_proj_weight [3E, E], in_proj_bias,
/// out_proj), so a torch state_dict loads. forward gives (output, weights): the weights
/// averaged over heads [N, L, S] (or per head [N, H, L, S]), undefined unless need_weights.
/// attn_mask ([L, S] or [N*H, L, S]) and key_padding_mask ([N, S]) are true where attention is
/// NOT allowed when bool (torch's convention for this module), added when float; is_causal
/// without a mask masks keys after each query.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);
  std::tuple<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                        const Tensor& key_padding_mask = {}, bool need_weights = true,
                                        const Tensor& attn_mask = {}) {
    return forward(query, key, value, key_padding_mask, need_weights, attn_mask);
  }
  Tensor in_proj_weight, in_proj_bias;
  Linear out_proj;

 private:
  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
};

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;    // [N, T, features] instead of torch's default [T, N, features]
  double dropout = 0;          // on each layer's output but the last, in train()
  bool bidirectional = false;  // a second direction, its output concatenated
};
/// LSTM and GRU: torch's gate orders (i, f, g, o and r, z, n), parameter names
/// (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse) and initialization
/// (uniform in +-1/sqrt(hidden_size)). Input [T, N, in] ([N, T, in] batch_first, or [T, in]
/// unbatched); states [num_layers * directions, N, hidden] (zeros when not given).
class RNNBase : public Module {
 public:
  RNNOptions options;

 protected:
  RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, RNNOptions options);
  /// The output, then the final states (h, and c for an LSTM).
  std::vector<Tensor> run(const Tensor& input, const std::vector<Tensor>& initial_states);

 private:
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  const char* name_;
  int64_t gates_, input_size_, hidden_size_;
  std::vector<Weights> weights_;  // layer-major, then direction
};
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {})
      : RNNBase("LSTM", 4, input_size, hidden_size, options) {}
  /// (output [T, N, D * hidden], (h_n, c_n)).
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         const std::tuple<Tensor, Tensor>& hc = {});
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> operator()(const Tensor& input,
                                                            const std::tuple<Tensor, Tensor>& hc = {}) {
    return forward(input, hc);
  }
};
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {})
      : RNNBase("GRU", 3, input_size, hidden_size, options) {}
  /// (output [T, N, D * hidden], h_n).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = {});
  std::tuple<Tensor, Tensor> operator()(const Tensor& input, const Tensor& h0 = {}) { return forward(input, h0); }
};

/// One step of an LSTM or a GRU: torch's LSTMCell and GRUCell (weight_ih, weight_hh, bias_ih,
/// bias_hh); input [N, in] or [in].
class RNNCellBase : public Module {
 public:
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias);
  Tensor input_projection(const Tensor& x, bool with_hh_bias) const;
  Tensor state_or_zeros(const Tensor& s, const Tensor& x) const;

 private:
  const char* name_;
  int64_t input_size_, hidden_size_;
};
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true)
      : RNNCellBase("LSTMCell", 4, input_size, hidden_size, bias) {}
  /// (h', c').
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const std::tuple<Tensor, Tensor>& hc = {});
  std::tuple<Tensor, Tensor> operator()(const Tensor& x, const std::tuple<Tensor, Tensor>& hc = {}) {
    return forward(x, hc);
  }
};
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true)
      : RNNCellBase("GRUCell", 3, input_size, hidden_size, bias) {}
  Tensor forward(const Tensor& x, const Tensor& h = {});
  Tensor operator()(const Tensor& x, const Tensor& h = {}) { return forward(x, h); }
};

/// dropout(x): functional form; identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace kiln::nn
