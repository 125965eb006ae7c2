// ir/fusion.h -- what a fused group is, shared by the fuse pass (which forms groups) and
// codegen (which lowers them).
//
// A group computes over one iteration space, its domain: the shape of its full-size values.
// Every value in it is either full (the domain's shape, computed per element) or reduced (the
// result of a reduction over the group's reduce axes, or pointwise work on such results: one
// value per kept index). Operands from outside broadcast to the domain NumPy-style. All
// reductions of a group share its reduce axes. When those are the trailing axes, reduced values
// may feed the group's later ops (softmax: max, then sum of exp(x - max), then the division);
// otherwise the reductions end the group.
#pragma once

#include "ir/graph.h"

namespace kiln::ir {

/// dtypes a fused reduction reads and writes (f16/bf16 reductions stay eager; f16/bf16
/// pointwise work and casts fuse, computed in f32 and rounded after each op as eagerly).
bool fusible_dtype(DType t);
/// Reductions a group can hold: sum, prod, amax, amin.
bool fusible_reduction(OpId op);

struct GroupShape {
  Dims domain;           // the iteration space
  Dims reduce_axes;      // sorted, non-negative; empty: no reduction
  bool trailing = true;  // the reduce axes are the domain's last ones
};
/// The domain and reduce axes of a fused group's body; throws kiln::Error when the body is not
/// a group the fuse pass could have formed (reductions over different axes or inputs).
GroupShape group_shape(const Graph& body);

}  // namespace kiln::ir
