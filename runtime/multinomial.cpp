// runtime/multinomial.cpp -- torch.multinomial as a composite of draws, a scan and an
// ordering, so it runs on every device and inside a trace:
// - with replacement, by inverse CDF: each sample is the first category whose cumulative
//   probability exceeds a uniform draw scaled to the row's total;
// - without, by the Gumbel-top-k trick: the k largest of log p + Gumbel noise are k draws
//   without replacement, in the order sequential draws would give them (Vieira 2014; Kool,
//   van Hoof and Welling 2019).
// Weights need not sum to one (as torch). On the CPU, outside a trace, the weights are checked
// as torch checks them: finite, non-negative, a positive sum, and enough non-zero categories
// to draw `num_samples` without replacement.
#include <cmath>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/rearrange.h"
#include "runtime/recorder.h"

namespace kiln {

namespace {

void check_weights(const Tensor& rows, int64_t num_samples, bool replacement) {
  std::vector<double> w = rows.to_vector<double>();
  int64_t n = rows.shape()[1];
  for (int64_t r = 0; r < rows.shape()[0]; ++r) {
    double total = 0;
    int64_t nonzero = 0;
    for (int64_t j = 0; j < n; ++j) {
      double v = w[static_cast<size_t>(r * n + j)];
      KILN_CHECK(std::isfinite(v) && v >= 0, "multinomial: weights must be finite and non-negative, got {} in row {}",
                 v, r);
      total += v;
      nonzero += v > 0;
    }
    KILN_CHECK(total > 0, "multinomial: row {} of the weights sums to 0", r);
    KILN_CHECK(replacement || nonzero >= num_samples,
               "multinomial: row {} has {} non-zero weights, too few for {} samples without replacement", r, nonzero,
               num_samples);
  }
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  KILN_CHECK(probs.defined() && is_float(probs.dtype()) && (probs.dim() == 1 || probs.dim() == 2),
             "multinomial: expected 1-d or 2-d float weights, got {}",
             probs.defined() ? probs.type().str() : "undefined");
  int64_t n = probs.shape().back();
  KILN_CHECK(n > 0, "multinomial: no categories in {}", probs.type().str());
  KILN_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got {}", num_samples);
  KILN_CHECK(replacement || num_samples <= n,
             "multinomial: cannot draw {} samples from {} categories without replacement ({})", num_samples, n,
             probs.type().str());
  Tensor p = (probs.dim() == 1 ? probs.unsqueeze(0) : probs).detach().to(DType::F64);
  int64_t rows = p.shape()[0];
  if (probs.device().is_cpu() && !active_recorder()) check_weights(p, num_samples, replacement);
  Tensor idx;
  if (replacement) {
    Tensor cdf = cumsum(p, 1);  // [rows, n]
    Tensor u = rand({rows, num_samples}, DType::F64, probs.device()) * cdf.slice(1, n - 1, n);
    // The number of cumulative weights at or below u is the first category above it.
    idx = sum(le(cdf.unsqueeze(1), u.unsqueeze(2)), {2});  // [rows, num_samples]
    idx = minimum(idx, n - 1);                             // u * total can round up to the total
  } else {
    Tensor gumbel = neg(log(neg(log(rand({rows, n}, DType::F64, probs.device())))));
    idx = std::get<1>(topk(log(p) + gumbel, num_samples, 1));
  }
  return probs.dim() == 1 ? idx.squeeze(0) : idx;
}

}  // namespace kiln
