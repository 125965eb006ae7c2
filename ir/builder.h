// ir/builder.h -- building graphs in C++ (passes, tests, tools): each op node's type comes from
// its op's shape rule, so an ill-typed node throws where it is added.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/shape_inference.h"

namespace kiln::ir {

///   ir::Builder b("affine");
///   uint32_t x = b.input({f32, {4, 3}}), w = b.param({f32, {3, 2}}, "w");
///   b.output(b.op(OpId::Relu, {b.op(OpId::Matmul, {x, w})}));
///   ir::Graph g = b.finish();
class Builder {
 public:
  explicit Builder(std::string name = "main");

  uint32_t input(const TensorType& type);
  uint32_t param(const TensorType& type, std::string name = "");
  /// A constant holding a copy of `value`.
  uint32_t constant(const Tensor& value);
  /// Op `id` on the tensor operands `in`. Pointwise numbers go in attrs.imm with their bits in
  /// attrs.imm_mask; the compute dtype (attrs.dtype) is filled in from the operands.
  uint32_t op(OpId id, std::vector<uint32_t> in, Attrs attrs = {});
  /// Writes `value` into parameter `param` when the graph runs.
  void assign(uint32_t param, uint32_t value);
  void output(uint32_t value);
  /// The graph, verified.
  Graph finish();
  /// The symbolic dim named `name` in the graph being built (`f32[B,3]`: b.dim("B")).
  int64_t dim(std::string_view name) { return g_.dim(name); }

 private:
  Graph g_;
  ShapeInference shapes_;
};

}  // namespace kiln::ir
