// nn/activation.cpp -- the activations that are composites of ops (relu, gelu, silu, sigmoid
// and tanh are ops of their own), with torch's definitions, defaults and derivatives at the
// kinks.
#include "nn/layers.h"

namespace kiln::nn {

// min(max(x, 0), 6); NaN stays NaN. The derivative is torch's hardtanh's: 1 strictly inside
// (0, 6), 0 at the ends and outside (clamp's would be 1 at the ends).
Tensor relu6(const Tensor& x) {
  Tensor inside = logical_and(gt(x, Scalar(0)), lt(x, Scalar(6)));
  return where(inside, x, clamp(x, Scalar(0), Scalar(6)).detach());
}

// x relu6(x + 3) / 6.
Tensor hardswish(const Tensor& x) { return x * relu6(x + 3.0) * (1.0 / 6.0); }

// x where x > 0, else slope x: the slope at 0 as torch's derivative takes it.
Tensor leaky_relu(const Tensor& x, double negative_slope) { return where(gt(x, Scalar(0)), x, x * negative_slope); }

// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold. The exponential reads
// min(beta x, threshold), so the branch where() drops stays finite and sends no NaN back.
Tensor softplus(const Tensor& x, double beta, double threshold) {
  Tensor bx = x * beta;
  Tensor soft = log1p(exp(minimum(bx, Scalar(threshold)))) * (1.0 / beta);
  return where(gt(bx, Scalar(threshold)), x, soft);
}

// x tanh(softplus(x)).
Tensor mish(const Tensor& x) { return x * tanh(softplus(x)); }

Tensor ReLU6::forward(const Tensor& x) { return relu6(x); }
Tensor Hardswish::forward(const Tensor& x) { return hardswish(x); }
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, slope_); }
Tensor Softplus::forward(const Tensor& x) { return softplus(x, beta_, threshold_); }
Tensor Mish::forward(const Tensor& x) { return mish(x); }

}  // namespace kiln::nn
