// ir/group_analysis.cpp -- a fused group's producers, levels, reductions and stashes
// (ir/group_analysis.h).
#include "ir/group_analysis.h"

#include <algorithm>

#include "ir/fusion.h"
#include "runtime/check.h"

namespace kiln::ir {

GroupAnalysis::GroupAnalysis(const Graph& b)
    : body(b), producer(b.types.size(), -1), input_index(b.types.size(), -1), level(b.types.size(), 0) {
  for (size_t k = 0; k < b.inputs.size(); ++k) input_index[b.inputs[k]] = static_cast<int>(k);
  for (size_t i = 0; i < b.nodes.size(); ++i) {
    const Node& n = b.nodes[i];
    KILN_CHECK(n.kind == NodeKind::Op || n.kind == NodeKind::Const,
               "codegen: a fused body holds only op and const nodes");
    producer[n.result] = static_cast<int>(i);
    int lv = 0;
    for (uint32_t v : n.inputs) lv = std::max(lv, level[v]);
    bool reduces = n.kind == NodeKind::Op && fusible_reduction(n.op);
    level[n.result] = lv + (reduces ? 1 : 0);
    if (!reduces) continue;
    reductions.push_back({n.result, n.op, accumulator_dtype(b.type(n.inputs[0]).dtype)});
    max_level = std::max(max_level, level[n.result]);
  }
}

bool GroupAnalysis::is_reduction(uint32_t v) const {
  int p = producer[v];
  return p >= 0 && body.nodes[p].kind == NodeKind::Op && fusible_reduction(body.nodes[p].op);
}

bool GroupAnalysis::reads(uint32_t from, uint32_t v) const {
  if (from == v) return true;
  int p = producer[from];
  if (p < 0 || is_reduction(from)) return false;
  for (uint32_t u : body.nodes[static_cast<size_t>(p)].inputs)
    if (reads(u, v)) return true;
  return false;
}

std::map<uint32_t, size_t> GroupAnalysis::plan_stash(std::span<const char> full, std::vector<char> taken) const {
  std::map<uint32_t, size_t> stash;
  for (const GroupReduction& r : reductions) {
    if (level[r.value] != max_level) continue;
    uint32_t v = body.nodes[producer[r.value]].inputs[0];
    if (producer[v] < 0 || body.nodes[producer[v]].kind != NodeKind::Op || stash.count(v)) continue;
    for (size_t o = 0; o < body.outputs.size(); ++o) {
      if (taken[o] || !full[o] || body.type(body.outputs[o]).dtype != body.type(v).dtype) continue;
      if (!reads(body.outputs[o], v)) continue;
      stash[v] = o;
      taken[o] = 1;
      break;
    }
  }
  return stash;
}

}  // namespace kiln::ir
