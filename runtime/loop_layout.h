// runtime/loop_layout.h -- the loop nest under every strided kernel, eager and fused: operands'
// strides broadcast to a shape, and dims merged where every operand allows it. One home for
// these rules, so the eager loops, the reductions and the Executable's fused kernels walk
// memory the same way.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/dims.h"

namespace kiln {

/// The strides of an operand (`shape`, `strides`) broadcast to `domain`, NumPy's rule (shapes
/// aligned at the right): 0 on broadcast dims and on dims of size 1. Throws kiln::Error
/// naming `what` when the shape does not broadcast to the domain.
Dims broadcast_strides(const Dims& shape, const Dims& strides, const Dims& domain, const char* what);

/// Drops the dims of size 1 and merges each dim into the one before it when every operand
/// steps through the two as through one (strides[k][d-1] == strides[k][d] * shape[d] for all
/// k), and, with `groups`, when both dims are in the same group (bit d set: dim d is in group
/// 1, such as the reduced dims of a fused reduction). Updates `shape`, each operand's strides
/// and `*groups` in place. A shape with no dim left stays empty.
void merge_dims(Dims& shape, std::span<Dims> strides, uint64_t* groups = nullptr);

}  // namespace kiln
