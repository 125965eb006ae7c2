// ir/shape_inference.h -- runs an op node's shape rule on IR types, symbolic dims included.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "ir/graph.h"

namespace kiln::ir {

/// Runs ops' shape rules on a graph's types. The rules need sizes, so each symbolic dim stands
/// for a distinct large size while a rule runs, and sizes that come back map to symbols again.
/// One instance per graph keeps a symbol's stand-in the same across nodes; a multiple of a
/// symbol (`B*128`) or a product (`B*T`) stands for that product of stand-ins. Sizes an op is given in its
/// attributes (reshape's shape) may be symbols too.
class ShapeInference {
 public:
  /// The type op node `n` gets from its op's rule, given its operands' types in `g`; the rule's
  /// kiln::Error propagates.
  TensorType infer(const Graph& g, const Node& n);
  /// Whether an inferred type is the declared one: equal, or equal once the declared type's
  /// symbols are their stand-ins (the rule of cat over two B rows gives 2B, declared B*2).
  bool matches(const Graph& g, const TensorType& inferred, const TensorType& declared);

 private:
  int64_t stand_in(const Graph& g, int64_t symbol);
  Dims concrete(const Graph& g, const Dims& d);
  Dims symbolic(const Dims& d) const;

  std::unordered_map<int64_t, int64_t> to_size_, to_symbol_;
  std::unordered_map<std::string, int64_t> unnamed_base_;  // B's stand-in where only B*k is named
  // Stand-ins are odd sizes from 100003 up: unlikely to be a real dim's exact size, and small
  // enough that a product of three (a [B,H,T,T] tensor's element count) stays within int64.
  int64_t next_ = 100003;
};

}  // namespace kiln::ir
