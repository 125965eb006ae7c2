// ir/shape_inference.cpp -- shape rules on IR types: symbols in, stand-in sizes, symbols out.
#include "ir/shape_inference.h"

#include <vector>

#include "runtime/check.h"

namespace kiln::ir {

int64_t ShapeInference::stand_in(const Graph& g, int64_t symbol) {
  if (auto it = to_size_.find(symbol); it != to_size_.end()) return it->second;
  size_t k = symbol_index(symbol);
  DimTerm term = k < g.dim_names.size() ? dim_term(g.dim_names[k]) : DimTerm{};
  int64_t size = 0;
  if (term.alone() || term.symbols.empty()) {
    size = next_;
    next_ += 2;
  } else {
    // A product: its names' stand-ins times its factor (a name gets a stand-in of its own even
    // where the graph never names it alone, so B*2 and B*T*4 stay multiples of one size).
    size = term.factor;
    for (std::string_view name : term.symbols) {
      int64_t alone = 0;
      for (size_t j = 0; j < g.dim_names.size() && !alone; ++j)
        if (g.dim_names[j] == name) alone = symbol_dim(j);
      int64_t b = 0;
      if (alone) {
        b = stand_in(g, alone);
      } else {
        auto [it, fresh] = unnamed_base_.try_emplace(std::string(name), next_);
        if (fresh) next_ += 2;
        b = it->second;
      }
      KILN_CHECK(size <= INT64_MAX / b, "dim {}: too large a product to check its shapes", g.dim_names[k]);
      size *= b;
    }
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
