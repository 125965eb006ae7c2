// runtime/collective.h -- the all_reduce op: a reduction across the processes of a group,
// applied, taped and traced like any op, and run by the engine that distributed/ installs
// (the runtime knows no process group). In a traced graph it is an ordered effect: the passes
// never fold, merge, drop or reorder it among collectives, so every rank runs its compiled
// step's reductions in the same order.
#pragma once

#include "runtime/op.h"

namespace kiln {

/// Reduces `data` (contiguous, freshly made by the op) in place across the ranks of process
/// group `group`, waiting for it; throws kiln::Error naming the group when there is none.
using AllReduceEngine = void (*)(int64_t group, Combine reduce, const Tensor& data);
/// distributed/ installs its engine when it makes its first process group.
void set_all_reduce_engine(AllReduceEngine engine);

/// The reduction (sum, max or min) of every rank's `x` in process group `group`, as a new
/// tensor; differentiable (the sum's gradient is the sum of the ranks' gradients).
/// distributed::all_reduced is the public form, taking a ProcessGroup.
Tensor all_reduce_op(const Tensor& x, int64_t group, Combine reduce);

}  // namespace kiln
