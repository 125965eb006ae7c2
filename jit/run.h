// jit/run.h -- run_graph: the interpreter that runs a graph op by op with the eager kernels.
#pragma once

#include <span>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::ir {
struct Graph;
}

namespace kiln::jit {

/// Runs `g` with the eager kernels (an Executable without kernels: one interpreter, not two):
/// `inputs` bind g.inputs and `params` bind g.params, in
/// order. Assign nodes write into the param tensors after every node has run. Nodes recorded
/// with grad mode on are taped when the caller's grad mode is on. Returns one tensor per
/// g.outputs (a constant's data is copied, so callers may write into what they get). Expects a
/// verified graph; throws kiln::Error when the counts differ (and, from the ops' shape rules,
/// when a tensor's type does not fit).
std::vector<Tensor> run_graph(const ir::Graph& g, std::span<const Tensor> inputs, std::span<const Tensor> params);

}  // namespace kiln::jit
