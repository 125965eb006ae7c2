// nn/init.cpp -- initializers.
#include "nn/init.h"

#include <cmath>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln::nn {

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  KILN_CHECK(w.dim() >= 2, "init: fan in/out need a weight of rank >= 2, got {}", w.type().str());
  int64_t field = 1;
  for (int64_t i = 2; i < w.dim(); ++i) field *= w.shape()[i];
  return {w.shape()[1] * field, w.shape()[0] * field};
}

namespace {
Tensor& fill_with(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}
double fan_for(const Tensor& t, const std::string& mode) {
  KILN_CHECK(mode == "fan_in" || mode == "fan_out", "init: mode must be fan_in or fan_out, got {}", mode);
  auto [in, out] = fans(t);
  return static_cast<double>(mode == "fan_in" ? in : out);
}
}  // namespace

Tensor& uniform_(Tensor& t, double lo, double hi) { return fill_with(t, rand(t.shape(), DType::F64) * (hi - lo) + lo); }
Tensor& normal_(Tensor& t, double mean, double std) { return fill_with(t, randn(t.shape(), DType::F64) * std + mean); }
Tensor& constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1); }

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode) {
  double gain = std::sqrt(2.0 / (1 + a * a));
  double bound = gain * std::sqrt(3.0 / fan_for(t, mode));
  return uniform_(t, -bound, bound);
}
Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode) {
  double gain = std::sqrt(2.0 / (1 + a * a));
  return normal_(t, 0, gain / std::sqrt(fan_for(t, mode)));
}
Tensor& xavier_uniform_(Tensor& t, double gain) {
  auto [in, out] = fans(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound);
}
Tensor& xavier_normal_(Tensor& t, double gain) {
  auto [in, out] = fans(t);
  return normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}

}  // namespace kiln::nn
