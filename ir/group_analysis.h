// ir/group_analysis.h -- a fused group's body as every code generator and the CUDA stage
// planner read it (the fuse pass makes the groups: ir/passes/fuse.cpp). Per value: the node
// that makes it, its input slot, and its level, the reductions on its longest path from the
// inputs (a kernel computes level k in its k-th pass over the reduced dims; level 0 needs
// none). The reductions in node order with their accumulators. Whether one value is computed
// from another at the same element, no reduction between (what a pass recomputes, and what a
// full output may stash). Nothing here depends on a loop layout or a target: a code generator
// renders what this says (codegen/lower.h holds what the renderers share).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

/// A reduction of the group: its result, its op, and the dtype it accumulates in.
struct GroupReduction {
  uint32_t value;
  OpId op;
  DType acc;
};

struct GroupAnalysis {
  /// Throws kiln::Error for a body that holds other nodes than ops and constants.
  explicit GroupAnalysis(const Graph& body);

  const Graph& body;
  std::vector<int> producer;               // per value: the node that makes it, -1 for an input
  std::vector<int> input_index;            // per value: its input slot, -1 for a node's result
  std::vector<int> level;                  // per value: the reductions on its longest path
  std::vector<GroupReduction> reductions;  // in node order
  int max_level = 0;

  /// Whether v is a reduction's result.
  bool is_reduction(uint32_t v) const;
  /// Whether computing `from` at an element reads `v` there: a path of element-wise ops back
  /// to it that crosses no reduction (a reduction's result is read, not computed again).
  bool reads(uint32_t from, uint32_t v) const;
  /// The stashes of a kernel whose outputs `full` (per output) are full-size: the input of a
  /// last-level reduction that a full output not yet `taken` (per output) of its dtype is
  /// computed from is stored into that output by the last reduction pass, and read back by the
  /// final pass instead of computed again (softmax's exp(x - max)). value -> output.
  std::map<uint32_t, size_t> plan_stash(std::span<const char> full, std::vector<char> taken) const;
};

}  // namespace kiln::ir
