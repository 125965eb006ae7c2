// runtime/type_rules.h -- shape/dtype rules shared by ops (each throws kiln::Error naming op).
#pragma once

#include <span>

#include "runtime/op.h"

namespace kiln {

/// Pointwise ops: operands (tensors and immediates) broadcast together; tensors must have the
/// compute dtype attrs.dtype (where's condition: bool); output dtype per the op's Promote.
TensorType pointwise_rule(OpId id, std::span<const Tensor> in, const Attrs& attrs);
/// Reductions: attrs.axes (empty: all) removed, or kept as 1 with attrs.keepdim.
TensorType reduce_rule(OpId id, std::span<const Tensor> in, const Attrs& attrs);
/// Normalizes and de-duplicates `axes` for a tensor of rank `rank`; empty means all axes.
Dims normalize_axes(const Dims& axes, int64_t rank, const char* op);

}  // namespace kiln
