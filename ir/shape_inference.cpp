// ir/shape_inference.cpp -- shape rules on IR types: symbols in, stand-in sizes, symbols out.
#include "ir/shape_inference.h"

#include <vector>

namespace kiln::ir {

Dims ShapeInference::concrete(const Dims& d) {
  Dims out = d;
  for (int64_t& v : out) {
    if (!is_symbol(v)) continue;
    auto [it, fresh] = to_size_.try_emplace(v, next_);
    if (fresh) {
      to_symbol_[next_] = v;
      next_ += 2;
    }
    v = it->second;
  }
  return out;
}

Dims ShapeInference::symbolic(const Dims& d) const {
  Dims out = d;
  for (int64_t& v : out)
    if (auto it = to_symbol_.find(v); it != to_symbol_.end()) v = it->second;
  return out;
}

TensorType ShapeInference::infer(const Graph& g, const Node& n) {
  std::vector<Tensor> args;
  args.reserve(n.inputs.size());
  for (uint32_t v : n.inputs) {
    TensorType t = g.type(v);
    t.shape = concrete(t.shape);
    args.push_back(Tensor::placeholder(t));
  }
  TensorType t = infer_type(n.op, args, n.attrs);
  t.shape = symbolic(t.shape);
  return t;
}

}  // namespace kiln::ir
