// runtime/ops/vjp_util.h -- shapes that derivative rules share, built from Tensor ops only.
#pragma once

#include "runtime/op.h"

namespace kiln {

/// The gradient of a reduction over `axes` (normalized, sorted), expanded back to `shape`.
Tensor unreduce(const Tensor& g, const Dims& shape, const Dims& axes, bool keepdim);
/// Pads (or crops, when negative) dim `dim` of t by `before` and `after` with zeros.
Tensor pad_dim(const Tensor& t, int64_t dim, int64_t before, int64_t after);
/// The gradient of x.slice(dim, start, stop, step) for an x of shape `shape`: g placed at the
/// sliced positions, zeros elsewhere.
Tensor slice_backward(const Tensor& g, const Dims& shape, int64_t dim, int64_t start, int64_t stop, int64_t step);

}  // namespace kiln
