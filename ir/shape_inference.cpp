// ir/shape_inference.cpp -- shape rules on IR types: symbols in, stand-in sizes, symbols out.
#include "ir/shape_inference.h"

#include <vector>

#include "runtime/check.h"


namespace kiln::ir {

int64_t ShapeInference::stand_in(const Graph& g, int64_t symbol) {
  if (auto it = to_size_.find(symbol); it != to_size_.end()) return it->second;
  size_t k = symbol_index(symbol);
  DimFactor f = k < g.dim_names.size() ? dim_factor(g.dim_names[k]) : DimFactor{};
  int64_t size = 0;
  if (f.factor > 1) {
    // A multiple of another symbol: that symbol's stand-in times the factor (the base gets a
    // stand-in of its own even where the graph never names it alone).
    int64_t base = 0;
    for (size_t j = 0; j < g.dim_names.size() && !base; ++j)
      if (g.dim_names[j] == f.base) base = symbol_dim(j);
    int64_t b = 0;
    if (base) {
      b = stand_in(g, base);
    } else {  // one stand-in per unnamed base, so B*2 and B*4 stay multiples of one size
      auto [it, fresh] = unnamed_base_.try_emplace(std::string(f.base), next_);
      if (fresh) next_ += 2;
      b = it->second;
    }
    KILN_CHECK(b <= INT64_MAX / f.factor, "dim {}: too large a multiple", g.dim_names[k]);
    size = b * f.factor;
  } else {
    size = next_;
    next_ += 2;
  }
  to_size_[symbol] = size;
  to_symbol_.try_emplace(size, symbol);
  return size;
}

Dims ShapeInference::concrete(const Graph& g, const Dims& d) {
  Dims out = d;
  for (int64_t& v : out)
    if (is_symbol(v)) v = stand_in(g, v);
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
    t.shape = concrete(g, t.shape);
    args.push_back(Tensor::placeholder(t));
  }
  Attrs a = n.attrs;
  a.shape = concrete(g, a.shape);  // sizes an op is given (reshape's, expand's) may be symbols
  TensorType t = infer_type(n.op, args, a);
  t.shape = symbolic(t.shape);
  return t;
}

bool ShapeInference::matches(const Graph& g, const TensorType& inferred, const TensorType& declared) {
  if (inferred == declared) return true;
  if (inferred.dtype != declared.dtype || !(inferred.device == declared.device)) return false;
  return concrete(g, inferred.shape) == concrete(g, declared.shape);
}

}  // namespace kiln::ir
