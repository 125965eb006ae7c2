// runtime/ops/vjp_util.cpp -- shapes that derivative rules share.
#include "runtime/ops/vjp_util.h"

#include "runtime/api.h"

namespace kiln {

Tensor unreduce(const Tensor& g, const Dims& shape, const Dims& axes, bool keepdim) {
  Tensor r = g;
  if (!keepdim)
    for (int64_t a : axes) r = r.unsqueeze(a);
  return r.expand(shape);
}

Tensor pad_dim(const Tensor& t, int64_t dim, int64_t before, int64_t after) {
  if (before == 0 && after == 0) return t;
  Dims pads(static_cast<size_t>(2 * (t.dim() - dim)), 0);
  pads[pads.size() - 2] = before;
  pads[pads.size() - 1] = after;
  return pad(t, pads);
}

Tensor slice_backward(const Tensor& g, const Dims& shape, int64_t dim, int64_t start, int64_t stop, int64_t step) {
  int64_t n = shape[dim];
  Tensor spread = g;
  if (step > 1) {
    // Interleave step - 1 zeros after each entry: [.., m, ..] -> [.., m * step, ..].
    int64_t m = g.shape()[dim];
    Dims merged = g.shape();
    merged[dim] = m * step;
    spread = pad_dim(g.unsqueeze(dim + 1), dim + 1, 0, step - 1).reshape(merged);
  }
  (void)stop;
  return pad_dim(spread, dim, start, n - start - spread.shape()[dim]);
}

}  // namespace kiln
