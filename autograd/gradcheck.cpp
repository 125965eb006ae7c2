// autograd/gradcheck.cpp -- analytical gradients against central finite differences in f64, on
// the inputs' device (the perturbations are made on the host and copied there).
#include <cmath>

#include "autograd/autograd.h"
#include "runtime/api.h"
#include "runtime/check.h"

namespace kiln::autograd {

std::string gradcheck(const std::function<Tensor(std::span<const Tensor>)>& fn, std::span<const Tensor> inputs,
                      const GradcheckOptions& opt) {
  std::vector<Tensor> checked;
  for (const Tensor& x : inputs) {
    KILN_CHECK(x.defined() && x.dtype() == DType::F64,
               "gradcheck: inputs must be f64 tensors (finite differences need the precision), got {}",
               x.defined() ? x.type().str() : "undefined");
    if (x.requires_grad()) checked.push_back(x);
  }
  KILN_CHECK(!checked.empty(), "gradcheck: no input requires grad");
  Tensor y = fn(inputs);
  KILN_CHECK(y.defined() && is_float(y.dtype()), "gradcheck: fn must return a float tensor");

  // A fixed random projection, so one backward checks every output element at once.
  std::vector<double> pv(static_cast<size_t>(y.numel()));
  uint64_t state = opt.seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (double& v : pv) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<double>(state >> 11) * 0x1p-53 * 2.0 - 1.0;
  }
  Tensor proj = from_vector(pv, y.shape()).to(y.device());
  Tensor loss = sum(y.to(DType::F64) * proj);
  std::vector<Tensor> analytic = grad({&loss, 1}, checked, {}, false, false, true);

  // Evaluated with grad mode on and perturbed inputs requiring grad, so fn may itself take
  // gradients (checking a second derivative).
  auto projected = [&](std::span<const Tensor> xs) { return sum(fn(xs).to(DType::F64) * proj).item<double>(); };
  for (size_t c = 0; c < checked.size(); ++c) {
    size_t which = 0;
    while (inputs[which].impl() != checked[c].impl()) ++which;
    std::vector<double> a = analytic[c].defined() ? analytic[c].to_vector<double>()
                                                  : std::vector<double>(static_cast<size_t>(checked[c].numel()), 0.0);
    std::vector<Tensor> xs(inputs.begin(), inputs.end());
    Device device = inputs[which].device();
    Tensor base = inputs[which].detach().to(cpu).contiguous().clone();
    auto on_device = [&](const Tensor& host) { return host.view(inputs[which].shape()).to(device).requires_grad_(); };
    for (int64_t j = 0; j < base.numel(); ++j) {
      Tensor plus = base.clone(), minus = base.clone();
      plus.data<double>()[j] += opt.eps;
      minus.data<double>()[j] -= opt.eps;
      xs[which] = on_device(plus);
      double fp = projected(xs);
      xs[which] = on_device(minus);
      double fm = projected(xs);
      double numeric = (fp - fm) / (2 * opt.eps);
      if (!(std::abs(a[j] - numeric) <= opt.atol + opt.rtol * std::abs(numeric))) {
        return fmt::format("gradcheck: input {} ({}), element {}: analytical {:.10g} vs numerical {:.10g}", which,
                           inputs[which].type().str(), j, a[j], numeric);
      }
    }
  }
  return "";
}

}  // namespace kiln::autograd
