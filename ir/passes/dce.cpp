// ir/passes/dce.cpp -- drop nodes whose values reach no output, no assign and no effect.
#include "ir/passes.h"

namespace kiln::ir {

Graph dce(const Graph& in) {
  std::vector<bool> live(in.types.size(), false);
  for (uint32_t v : in.outputs) live[v] = true;
  std::vector<bool> keep(in.nodes.size(), false);
  for (size_t i = in.nodes.size(); i-- > 0;) {
    const Node& n = in.nodes[i];
    // Assigns and collectives are effects.
    keep[i] = n.kind == NodeKind::Assign || (n.kind == NodeKind::Op && op_def(n.op).effect);
    for (uint32_t v : defined_values(n)) keep[i] = keep[i] || live[v];
    if (keep[i])
      for (uint32_t v : n.inputs) live[v] = true;
  }
  Graph out = in;
  out.nodes.clear();
  for (size_t i = 0; i < in.nodes.size(); ++i)
    if (keep[i]) out.nodes.push_back(in.nodes[i]);
  return out;
}

}  // namespace kiln::ir
