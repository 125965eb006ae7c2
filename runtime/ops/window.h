// runtime/ops/window.h -- shape arithmetic shared by the sliding-window ops (conv2d, pools).
#pragma once

#include <cstdint>

#include "runtime/check.h"
#include "runtime/tensor.h"

namespace kiln {

/// Output length of a window of size k (dilation d) slid with stride s over `in` padded by p
/// on both sides. In 128 bits: attributes read from IR text can be anything; a result past
/// int64 is clamped (the shape check of the output rejects it).
inline int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  using Wide = __int128;
  Wide span = Wide{in} + 2 * Wide{p} - Wide{d} * (Wide{k} - 1) - 1;
  if (span < 0) return 0;
  Wide o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= Wide{in} + p) --o;  // the last window must start inside the input
  return o > INT64_MAX ? INT64_MAX : static_cast<int64_t>(o);
}

/// Checks that `v` (an attribute named `what` of `op`) holds two values >= min.
inline void check_pair(const Dims& v, const char* what, const char* op, int64_t min) {
  KILN_CHECK(v.size() == 2 && v[0] >= min && v[1] >= min, "{}: {} must be two values >= {}, got {}", op, what, min,
             shape_str(v));
}

}  // namespace kiln
