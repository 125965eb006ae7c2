// nn/utils.h -- gradient clipping (torch.nn.utils.clip_grad_norm_ and clip_grad_value_).
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace kiln::nn::utils {

/// Scales the parameters' gradients in place so that their total norm of order `norm_type`
/// (infinity: the largest magnitude) is at most max_norm; returns the total norm before
/// clipping (f32, or f64 for f64 gradients), on the gradients' device. Parameters without a
/// gradient are skipped. error_if_nonfinite: throw when the norm is NaN or infinite (this reads
/// it on the host).
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// Clamps every gradient element to [-clip_value, clip_value], in place.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace kiln::nn::utils
