// ir/specialize.cpp -- binding symbolic dims to sizes, and substituting them.
#include "ir/specialize.h"

#include <fmt/format.h>

#include "runtime/check.h"

namespace kiln::ir {

int64_t dim_size(const Graph& g, int64_t symbol, const DimSizes& sizes) {
  size_t k = symbol_index(symbol);
  KILN_CHECK(k < g.dim_names.size(), "@{}: symbolic dim {} has no name", g.name, k);
  DimFactor f = dim_factor(g.dim_names[k]);
  auto it = sizes.find(f.base);
  KILN_CHECK(it != sizes.end(), "@{}: no size for symbolic dim {}", g.name, g.dim_names[k]);
  KILN_CHECK(f.factor == 1 || it->second <= INT64_MAX / f.factor, "@{}: dim {} overflows with {} = {}", g.name,
             g.dim_names[k], f.base, it->second);
  return it->second * f.factor;
}

DimSizes bind_dims(const Graph& g, std::span<const TensorType> types, std::span<const std::string> names,
                   const std::string& what) {
  KILN_CHECK(types.size() <= g.inputs.size(), "{}: takes {} inputs, got {}", what, g.inputs.size(), types.size());
  DimNamesScope scope(&g.dim_names);
  auto input = [&](size_t i) {
    return i < names.size() && !names[i].empty() ? fmt::format("input '{}'", names[i]) : fmt::format("input {}", i);
  };
  DimSizes sizes;
  // Plain symbols first, so a multiple is checked against its base wherever they appear.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < types.size(); ++i) {
      const TensorType& want = g.type(g.inputs[i]);
      const TensorType& got = types[i];
      if (pass == 0) {
        KILN_CHECK(got.dtype == want.dtype, "{}: {} is {}, expected dtype {} ({})", what, input(i), got.str(),
                   dtype_name(want.dtype), want.str());
        KILN_CHECK(got.shape.size() == want.shape.size(), "{}: {} is {}, expected rank {} ({})", what, input(i),
                   got.str(), want.shape.size(), want.str());
        KILN_CHECK(got.device == want.device, "{}: {} is on {}, expected {}", what, input(i), got.device.str(),
                   want.device.str());
      }
      for (size_t d = 0; d < want.shape.size(); ++d) {
        int64_t w = want.shape[d], n = got.shape[d];
        if (!is_symbol(w)) {
          KILN_CHECK(pass == 1 || n == w, "{}: {} is {}: dim {} is {}, expected {} ({})", what, input(i), got.str(), d,
                     n, w, want.str());
          continue;
        }
        std::string name = g.dim_names.at(symbol_index(w));
        DimFactor f = dim_factor(name);
        if ((f.factor == 1) != (pass == 0)) continue;
        auto it = sizes.find(f.base);
        if (f.factor == 1 && it == sizes.end()) {
          sizes.emplace(name, n);
          continue;
        }
        if (it == sizes.end()) {  // a multiple whose base no input names alone
          KILN_CHECK(n % f.factor == 0, "{}: {} is {}: dim {} ({}) must be a multiple of {}, got {}", what, input(i),
                     got.str(), d, name, f.factor, n);
          sizes.emplace(std::string(f.base), n / f.factor);
          continue;
        }
        KILN_CHECK(it->second <= INT64_MAX / f.factor, "{}: {} is {}: dim {} ({}) overflows with {} = {}", what, input(i),
                   got.str(), d, name, f.base, it->second);
        KILN_CHECK(n == it->second * f.factor, "{}: {} is {}: dim {} is {}, expected {} = {} as {} is {} ({})", what,
                   input(i), got.str(), d, n, name, it->second * f.factor, f.base, it->second, want.str());
      }
    }
  return sizes;
}

namespace {
void substitute(const Graph& scope, Dims& d, const DimSizes& sizes) {
  for (int64_t& v : d)
    if (is_symbol(v)) v = dim_size(scope, v, sizes);
}
}  // namespace

Graph specialize(const Graph& g, const DimSizes& sizes) {
  Graph out = g;
  for (TensorType& t : out.types) substitute(g, t.shape, sizes);
  for (Node& n : out.nodes) {
    substitute(g, n.attrs.shape, sizes);
    if (n.body) {
      Graph body = *n.body;
      if (body.dim_names.empty()) body.dim_names = g.dim_names;  // one table for a graph and its bodies
      n.body = std::make_shared<const Graph>(specialize(body, sizes));
    }
  }
  out.dim_names.clear();
  return out;
}

}  // namespace kiln::ir
