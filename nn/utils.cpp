// nn/utils.cpp -- gradient clipping, as torch.nn.utils: in place on the parameters' gradients,
// with tensor ops only, so a traced whole step clips as an eager one does.
#include "nn/utils.h"

#include <cmath>
#include <limits>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  KILN_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive (or infinity), got {}", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return scalar_tensor(0.0, DType::F32);
  // The norm of the per-gradient norms is the norm of all elements together; each in f32 or
  // wider (a half gradient's squares overflow f16).
  bool inf = std::isinf(norm_type);
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) {
    Tensor a = abs(g.to(g.dtype() == DType::F64 ? DType::F64 : DType::F32));
    norms.push_back(inf ? amax(a).reshape({1}) : pow(sum(pow(a, norm_type)), 1.0 / norm_type).reshape({1}));
  }
  Tensor all = cat(norms, 0).to(norms[0].device());
  Tensor total = inf ? amax(all) : pow(sum(pow(all, norm_type)), 1.0 / norm_type);
  if (error_if_nonfinite) {
    double t = total.item<double>();
    KILN_CHECK(std::isfinite(t),
               "clip_grad_norm_: the total norm of order {} of the gradients is {}, so they "
               "cannot be clipped (error_if_nonfinite = true)",
               norm_type, t);
  }
  // Scale by min(1, max_norm / (total + 1e-6)), as torch, without reading the norm on the host.
  // New tensors rather than mul_: a gradient may be an expanded view (sum's is).
  Tensor scale = clamp(max_norm / (total + 1e-6), std::nullopt, Scalar(1.0));
  for (const Tensor& p : parameters)
    if (Tensor g = p.grad(); g.defined()) Tensor(p).set_grad(g * scale.to(g.dtype()));
  return total;
}

Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  NoGradGuard no_grad;
  KILN_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be non-negative, got {}", clip_value);
  for (const Tensor& p : parameters)
    if (Tensor g = p.grad(); g.defined()) Tensor(p).set_grad(clamp(g, Scalar(-clip_value), Scalar(clip_value)));
}

}  // namespace kiln::nn::utils
