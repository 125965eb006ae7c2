// nn/loss.h -- loss functions, composed of ops (so they differentiate, trace and fuse).
#pragma once

#include "runtime/tensor.h"

namespace kiln {

enum class Reduction { None, Mean, Sum };

/// mean((pred - target)^2)
Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction reduction = Reduction::Mean);

/// Negative log-likelihood of class indices: logp [N, C] (or [N, C, d...]) holds log
/// probabilities, target [N] (or [N, d...]) integer classes. Targets equal to ignore_index
/// contribute nothing, and Mean divides by the number of the others.
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);

/// nll_loss(log_softmax(logits, 1), target), with optional label smoothing: the target
/// distribution puts 1 - s on the class and s / C on every class (as torch.nn.CrossEntropyLoss).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);

/// Binary cross-entropy on logits, computed stably: max(x, 0) - x y + log(1 + exp(-|x|)).
/// pos_weight (optional, broadcast over the last dim) scales the positive term.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = {});

}  // namespace kiln
