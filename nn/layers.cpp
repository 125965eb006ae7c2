// nn/layers.cpp -- layer construction and initialization.
#include "nn/layers.h"

#include <cmath>

#include "nn/init.h"
#include "runtime/check.h"

namespace kiln::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  KILN_CHECK(in > 0 && out > 0, "Linear: feature counts must be positive, got {} and {}", in, out);
  weight = empty({out, in});
  kaiming_uniform_(weight, std::sqrt(5.0));  // PyTorch's default: bound 1/sqrt(in)
  register_parameter("weight", weight);
  if (has_bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    bias = empty({out});
    uniform_(bias, -bound, bound);
    register_parameter("bias", bias);
  }
}

Conv2d::Conv2d(int64_t in, int64_t out, Dims kernel, Conv2dOptions opt) : options(opt) {
  KILN_CHECK(kernel.size() == 2 && kernel[0] > 0 && kernel[1] > 0, "Conv2d: kernel must be two positive sizes, got {}",
             shape_str(kernel));
  KILN_CHECK(opt.groups > 0 && in % opt.groups == 0 && out % opt.groups == 0,
             "Conv2d: groups {} must divide in_channels {} and out_channels {}", opt.groups, in, out);
  weight = empty({out, in / opt.groups, kernel[0], kernel[1]});
  kaiming_uniform_(weight, std::sqrt(5.0));
  register_parameter("weight", weight);
  if (opt.bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in / opt.groups * kernel[0] * kernel[1]));
    bias = empty({out});
    uniform_(bias, -bound, bound);
    register_parameter("bias", bias);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx) {
  KILN_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got {} and {}", num, dim);
  KILN_CHECK(!padding_idx || (*padding_idx >= -num && *padding_idx < num),
             "Embedding: padding_idx {} is out of range for {} embeddings", padding_idx.value_or(0), num);
  if (padding_idx) padding_idx_ = *padding_idx < 0 ? *padding_idx + num : *padding_idx;
  weight = randn({num, dim});
  if (padding_idx_) weight.select(0, *padding_idx_).fill_(0);
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight, padding_idx_); }

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  Tensor out = kiln::embedding(indices, weight);
  if (!padding_idx) return out;
  int64_t num = weight.shape()[0], pad = *padding_idx < 0 ? *padding_idx + num : *padding_idx;
  KILN_CHECK(pad >= 0 && pad < num, "embedding: padding_idx {} is out of range for {}", *padding_idx,
             weight.type().str());
  // The rows read at padding_idx, detached: their gradient does not reach the table. (Masking
  // the output costs its size; masking the table would cost the whole table every call.)
  Tensor at_pad = eq(indices, Scalar(pad)).unsqueeze(-1).to(out.device());
  return where(at_pad, out.detach(), out);
}

LayerNorm::LayerNorm(Dims shape, double eps, bool affine) : shape_(shape), eps_(eps) {
  if (affine) {
    weight = ones(shape);
    bias = zeros(shape);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
}

Dropout::Dropout(double p) : p_(p) { KILN_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got {}", p); }
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }

Tensor dropout(const Tensor& x, double p, bool training) {
  KILN_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got {}", p);
  if (!training || p == 0) return x;
  // A bool mask, drawn where x is: what the backward keeps is a byte an element, not x's
  // dtype's; x * keep promotes it, so the values are those of a mask in x's dtype.
  Tensor keep = bernoulli(x.shape(), 1.0 - p, DType::Bool, x.device());
  return x * keep * (1.0 / (1.0 - p));
}

}  // namespace kiln::nn
