// ir/passes/transpose_matmul.cpp -- permute(matmul(a, b)) swapping the last two dims becomes
// matmul(bT, aT): the product is written in the layout its reader wants (a linear layer's
// weight gradient, x^T @ g read as its transpose by the optimizer's update) instead of read
// transposed. Not bit-preserving (BLAS may sum the product's terms in another order), so it
// runs with fusion, whose results are within rounding, and never in the default pipeline.
#include <utility>

#include "ir/passes.h"

namespace kiln::ir {
namespace {

// Whether `axes` swaps the last two of `rank` dims and keeps the rest.
bool swaps_last_two(const Dims& axes, size_t rank) {
  if (rank < 2 || axes.size() != rank) return false;
  for (size_t d = 0; d + 2 < rank; ++d)
    if (axes[d] != static_cast<int64_t>(d)) return false;
  return axes[rank - 2] == static_cast<int64_t>(rank - 1) && axes[rank - 1] == static_cast<int64_t>(rank - 2);
}

Dims swap_last_two(size_t rank) {
  Dims axes;
  for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  std::swap(axes[rank - 2], axes[rank - 1]);
  return axes;
}

}  // namespace

Graph transpose_matmul(const Graph& in) {
  std::vector<int> uses(in.types.size(), 0), def(in.types.size(), -1);
  for (size_t i = 0; i < in.nodes.size(); ++i) {
    for (uint32_t v : in.nodes[i].inputs) ++uses[v];
    for (uint32_t v : defined_values(in.nodes[i])) def[v] = static_cast<int>(i);
  }
  for (uint32_t v : in.outputs) ++uses[v];
  Graph out = in;
  out.nodes.clear();
  std::vector<char> dropped(in.nodes.size(), 0);
  // The matmuls to rewrite: used once, by a permute that swaps the result's last two dims, with
  // both operands of rank 2 or more (a vector operand has other semantics).
  std::vector<int> rewrite(in.nodes.size(), -1);  // permute node -> its matmul node
  for (size_t i = 0; i < in.nodes.size(); ++i) {
    const Node& p = in.nodes[i];
    if (p.kind != NodeKind::Op || p.op != OpId::Permute) continue;
    int m = def[p.inputs[0]];
    if (m < 0) continue;
    const Node& mm = in.nodes[static_cast<size_t>(m)];
    if (mm.kind != NodeKind::Op || mm.op != OpId::Matmul || uses[mm.result] != 1) continue;
    size_t rank = in.type(mm.result).shape.size();
    if (!swaps_last_two(p.attrs.axes, rank)) continue;
    if (in.type(mm.inputs[0]).shape.size() < 2 || in.type(mm.inputs[1]).shape.size() < 2) continue;
    rewrite[i] = m;
    dropped[static_cast<size_t>(m)] = 1;
  }
  for (size_t i = 0; i < in.nodes.size(); ++i) {
    if (dropped[i]) continue;
    if (rewrite[i] < 0) {
      out.nodes.push_back(in.nodes[i]);
      continue;
    }
    const Node& mm = in.nodes[static_cast<size_t>(rewrite[i])];
    const Node& p = in.nodes[i];
    auto transposed = [&](uint32_t v) {
      Node t;
      t.op = OpId::Permute;
      t.attrs.axes = swap_last_two(out.type(v).shape.size());
      t.inputs = {v};
      t.loc = mm.loc;
      t.grad = mm.grad;
      TensorType type = out.type(v);
      std::swap(type.shape[type.shape.size() - 2], type.shape[type.shape.size() - 1]);
      t.result = out.add_value(type);
      out.nodes.push_back(t);
      return t.result;
    };
    Node m2 = mm;
    m2.inputs = {transposed(mm.inputs[1]), transposed(mm.inputs[0])};
    m2.result = p.result;  // the permute's value, now computed directly
    m2.loc = p.loc.known() || !p.loc.module.empty() ? p.loc : mm.loc;
    out.nodes.push_back(m2);
  }
  return out;
}

}  // namespace kiln::ir
