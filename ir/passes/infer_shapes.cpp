// ir/passes/infer_shapes.cpp -- recompute every op node's result type from its op's shape rule,
// first to last, so a changed argument type flows through the whole graph.
#include <fmt/format.h>

#include "ir/passes.h"
#include "ir/shape_inference.h"

namespace kiln::ir {

Graph infer_shapes(const Graph& in) {
  Graph out = in;
  ShapeInference shapes;
  for (Node& n : out.nodes) {
    if (n.kind != NodeKind::Op) continue;
    // The text form does not spell a pointwise node's compute dtype: it follows the operands.
    if (op_family(n.op) == OpFamily::Pointwise) n.attrs.dtype = pointwise_compute_dtype(out, n);
    try {
      out.types.at(n.result) = shapes.infer(out, n);
    } catch (const Error& e) {
      throw Error(fmt::format("infer-shapes: @{}: {}: {}", out.name, print_node(out, n), e.what()));
    }
  }
  return out;
}

}  // namespace kiln::ir
