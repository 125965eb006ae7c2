// ir/passes/cse.cpp -- merge nodes that apply the same op, with the same attributes, to the
// same values (every op in ops.def is pure but the collectives, which are effects; constants, assigns
// and effects are left alone).
#include <unordered_map>

#include "ir/passes.h"

namespace kiln::ir {

Graph cse(const Graph& in) {
  Graph out = in;
  out.nodes.clear();
  std::vector<uint32_t> same(in.types.size());  // value -> the value it was merged into
  for (uint32_t v = 0; v < same.size(); ++v) same[v] = v;
  std::unordered_map<std::string, uint32_t> seen;
  for (const Node& n0 : in.nodes) {
    Node n = n0;
    for (uint32_t& v : n.inputs) v = same[v];
    if (n.kind == NodeKind::Op && !op_def(n.op).effect) {
      auto [it, fresh] = seen.try_emplace(node_key(out, n), n.result);
      if (!fresh) {
        same[n.result] = it->second;
        continue;
      }
    }
    out.nodes.push_back(std::move(n));
  }
  for (uint32_t& v : out.outputs) v = same[v];
  return out;
}

}  // namespace kiln::ir
