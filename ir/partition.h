// ir/partition.h -- splitting a joint forward+backward graph into the graph a call runs and
// the graph its backward runs, keeping for the backward as few bytes as a min cut allows.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

/// Where a value the backward reads comes from when the forward has run.
struct SavedValue {
  enum Kind : uint8_t { Arg, Param, Computed } kind;
  size_t index;  // Arg: position in forward.inputs; Param: in forward.params; Computed: in
                 // forward.outputs
};

struct Partition {
  /// inputs: the joint's first num_args; params: the joint's; outputs: the joint's first
  /// num_results, then the computed values the backward reads.
  Graph forward;
  /// inputs: one per saved value, then the joint's inputs after num_args (the results'
  /// gradients); no params; outputs: the joint's outputs after num_results.
  Graph backward;
  std::vector<SavedValue> saved;     // in backward.inputs order
  std::vector<uint32_t> recomputed;  // joint values the backward computes again (not saved)
};

/// Splits `joint`, whose inputs are num_args arguments followed by gradients of results and
/// whose outputs are num_results results followed by the arguments' and params' gradients.
/// Every value of the forward part the backward reads is either saved or recomputed inside
/// the backward: only pointwise ops, casts and views are recomputed (matmuls, convolutions,
/// reductions are saved), and the choice minimizes the bytes saved (a min cut, as AOTAutograd's
/// partitioner makes). Params cost nothing to keep: they are live anyway; nor do the arguments
/// when `args_kept` (a caller that keeps them for its backward whatever is saved).
Partition partition(const Graph& joint, size_t num_args, size_t num_results, bool args_kept = false);

}  // namespace kiln::ir
