// ir/specialize.cpp -- binding symbolic dims to sizes, and substituting them.
#include "ir/specialize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/check.h"

namespace kiln::ir {

int64_t dim_size(const Graph& g, int64_t symbol, const DimSizes& sizes) {
  size_t k = symbol_index(symbol);
  KILN_CHECK(k < g.dim_names.size(), "@{}: symbolic dim {} has no name", g.name, k);
  DimTerm t = dim_term(g.dim_names[k]);
  int64_t n = t.factor;
  for (std::string_view name : t.symbols) {
    auto it = sizes.find(name);
    KILN_CHECK(it != sizes.end(), "@{}: no size for symbolic dim {}", g.name, name);
    KILN_CHECK(it->second == 0 || n <= INT64_MAX / it->second, "@{}: dim {} overflows with {} = {}", g.name,
               g.dim_names[k], name, it->second);
    n *= it->second;
  }
  return n;
}

namespace {
// r with r^power == v, or -1 when no integer is (a power above 1 only for T*T and its like).
int64_t integer_root(int64_t v, int power) {
  if (power == 1) return v;
  auto raised = [power](int64_t r) {  // r^power, saturated at INT64_MAX
    int64_t p = 1;
    for (int i = 0; i < power; ++i) p = r != 0 && p > INT64_MAX / r ? INT64_MAX : p * r;
    return p;
  };
  auto guess = static_cast<int64_t>(std::llround(std::pow(static_cast<double>(v), 1.0 / power)));
  for (int64_t r = std::max<int64_t>(guess - 1, 0); r <= guess + 1; ++r)
    if (raised(r) == v) return r;
  return -1;
}
}  // namespace

TermBinding bind_term(const DimTerm& t, int64_t n, DimSizes& sizes) {
  // The product of what is bound (saturated: past n it cannot fit anyway), and the one name
  // left unbound, if one is.
  int64_t known = t.factor;
  std::string_view unbound;
  int unbound_count = 0;
  for (std::string_view name : t.symbols) {
    auto it = sizes.find(name);
    if (it == sizes.end()) {
      if (unbound_count == 0 || name != unbound) ++unbound_count;
      unbound = name;
      continue;
    }
    known = it->second != 0 && known > INT64_MAX / it->second ? INT64_MAX : known * it->second;
  }
  if (unbound_count == 0) return known == n ? TermBinding::Fits : TermBinding::Conflict;
  int power = static_cast<int>(std::count(t.symbols.begin(), t.symbols.end(), unbound));
  if (unbound_count > 1) return TermBinding::Pending;
  if (known == 0) return n == 0 ? TermBinding::Pending : TermBinding::Conflict;
  if (n % known != 0) return TermBinding::Conflict;
  int64_t root = integer_root(n / known, power);
  if (root < 0) return TermBinding::Conflict;
  sizes.emplace(std::string(unbound), root);
  return TermBinding::Bound;
}

DimSizes bind_dims(const Graph& g, std::span<const TensorType> types, std::span<const std::string> names,
                   const std::string& what) {
  KILN_CHECK(types.size() <= g.inputs.size(), "{}: takes {} inputs, got {}", what, g.inputs.size(), types.size());
  DimNamesScope scope(&g.dim_names);
  auto input = [&](size_t i) {
    return i < names.size() && !names[i].empty() ? fmt::format("input '{}'", names[i]) : fmt::format("input {}", i);
  };
  for (size_t i = 0; i < types.size(); ++i) {
    const TensorType& want = g.type(g.inputs[i]);
    const TensorType& got = types[i];
    KILN_CHECK(got.dtype == want.dtype, "{}: {} is {}, expected dtype {} ({})", what, input(i), got.str(),
               dtype_name(want.dtype), want.str());
    KILN_CHECK(got.shape.size() == want.shape.size(), "{}: {} is {}, expected rank {} ({})", what, input(i), got.str(),
               want.shape.size(), want.str());
    KILN_CHECK(got.device == want.device, "{}: {} is on {}, expected {}", what, input(i), got.device.str(),
               want.device.str());
    for (size_t d = 0; d < want.shape.size(); ++d)
      KILN_CHECK(is_symbol(want.shape[d]) || got.shape[d] == want.shape[d],
                 "{}: {} is {}: dim {} is {}, expected {} ({})", what, input(i), got.str(), d, got.shape[d],
                 want.shape[d], want.str());
  }
  // Names standing alone first, then products with one name left unbound (B*T once B is
  // known), until nothing new is bound; then every dim must fit.
  DimSizes sizes;
  auto each_symbolic_dim = [&](auto&& f) {
    for (size_t i = 0; i < types.size(); ++i) {
      const TensorType& want = g.type(g.inputs[i]);
      for (size_t d = 0; d < want.shape.size(); ++d)
        if (is_symbol(want.shape[d])) f(i, d, dim_term(g.dim_names.at(symbol_index(want.shape[d]))));
    }
  };
  each_symbolic_dim([&](size_t i, size_t d, const DimTerm& t) {
    if (t.alone()) sizes.emplace(std::string(t.symbols[0]), types[i].shape[d]);
  });
  for (bool bound = true; bound;) {
    bound = false;
    each_symbolic_dim([&](size_t i, size_t d, const DimTerm& t) {
      bound = (!t.alone() && bind_term(t, types[i].shape[d], sizes) == TermBinding::Bound) || bound;
    });
  }
  each_symbolic_dim([&](size_t i, size_t d, const DimTerm& t) {
    const TensorType& got = types[i];
    std::string name = dim_term_name(t);
    int64_t n = got.shape[d];
    switch (bind_term(t, n, sizes)) {
      case TermBinding::Fits:
      case TermBinding::Bound: return;
      case TermBinding::Pending:
        throw Error(fmt::format("{}: {} is {}: dim {} ({}) is {}, and no input gives the sizes of its names alone",
                                what, input(i), got.str(), d, name, n));
      case TermBinding::Conflict: break;
    }
    // What the product is, from the names bound; a name unbound is one that n cannot give.
    std::vector<std::string> bound;
    int64_t expected = t.factor;
    std::string_view last, missing;
    for (std::string_view s : t.symbols) {
      auto it = sizes.find(s);
      if (it == sizes.end()) {
        missing = s;
        continue;
      }
      expected = it->second != 0 && expected > INT64_MAX / it->second ? INT64_MAX : expected * it->second;
      if (s != last) bound.push_back(fmt::format("{} is {}", s, it->second));
      last = s;
    }
    if (!missing.empty())
      throw Error(fmt::format("{}: {} is {}: dim {} ({}) is {}, which is no {} times a size {}{}", what, input(i),
                              got.str(), d, name, n, expected, missing,
                              bound.empty() ? "" : fmt::format(" (as {})", fmt::join(bound, " and "))));
    throw Error(fmt::format(
        "{}: {} is {}: dim {} is {}, expected {}{} ({})", what, input(i), got.str(), d, n, name,
        t.alone() ? fmt::format(" = {}", expected) : fmt::format(" = {} as {}", expected, fmt::join(bound, " and ")),
        g.type(g.inputs[i]).str()));
  });
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
