// nn/init.h -- in-place initializers (torch.nn.init), run without recording gradients.
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace kiln::nn {

/// fan_in and fan_out of a weight: [out, in] or [out, in, k...] (receptive field multiplies).
std::pair<int64_t, int64_t> fans(const Tensor& w);

Tensor& uniform_(Tensor& t, double lo = 0, double hi = 1);
Tensor& normal_(Tensor& t, double mean = 0, double std = 1);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
/// He init for a leaky-relu with negative slope `a` (a = 0: relu): bound = gain*sqrt(3/fan).
/// mode "fan_in" (default) or "fan_out".
Tensor& kaiming_uniform_(Tensor& t, double a = 0, const std::string& mode = "fan_in");
Tensor& kaiming_normal_(Tensor& t, double a = 0, const std::string& mode = "fan_in");
/// Glorot init: std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1);
Tensor& xavier_normal_(Tensor& t, double gain = 1);

}  // namespace kiln::nn
