// ir/builder.cpp -- building graphs with types from the ops' shape rules.
#include "ir/builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "runtime/check.h"

namespace kiln::ir {

int64_t Graph::dim(std::string_view name) {
  KILN_CHECK(!name.empty(), "dim: a symbolic dim needs a name");
  std::string spelled = dim_term_name(dim_term(name));  // B*T and T*B are one dim
  for (size_t k = 0; k < dim_names.size(); ++k)
    if (dim_names[k] == spelled) return symbol_dim(k);
  KILN_CHECK(dim_names.size() < kMaxDimNames, "@{}: more than {} symbolic dim names ('{}')", this->name, kMaxDimNames,
             name);
  dim_names.push_back(std::move(spelled));
  return symbol_dim(dim_names.size() - 1);
}

namespace {
bool is_name(std::string_view part) {
  if (part.empty() || std::isdigit(static_cast<unsigned char>(part[0]))) return false;
  return std::all_of(part.begin(), part.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}
// A factor from 2 to 2^31 written in decimal digits, or 0 when `part` is none.
int64_t factor_of(std::string_view part) {
  if (part.empty() || part.size() > 10) return 0;
  int64_t k = 0;
  for (char c : part) {
    if (c < '0' || c > '9') return 0;
    k = k * 10 + (c - '0');
  }
  return k >= 2 && k <= (int64_t{1} << 31) ? k : 0;
}
}  // namespace

DimTerm dim_term(std::string_view name) {
  DimTerm t;
  size_t begin = 0;
  while (true) {
    size_t star = name.find('*', begin);
    std::string_view part = name.substr(begin, star == std::string_view::npos ? std::string_view::npos : star - begin);
    bool last = star == std::string_view::npos;
    if (is_name(part)) {
      t.symbols.push_back(part);
    } else if (int64_t k = factor_of(part); last && k && !t.symbols.empty()) {
      t.factor = k;
    } else {
      return {{name}, 1};  // not a product: a name of its own
    }
    if (last) break;
    begin = star + 1;
  }
  std::sort(t.symbols.begin(), t.symbols.end());
  return t;
}

std::string dim_term_name(const DimTerm& term) {
  std::string s;
  for (std::string_view v : term.symbols) {
    if (!s.empty()) s += '*';
    s += v;
  }
  if (term.factor != 1) s += fmt::format("*{}", term.factor);
  return s;
}

Builder::Builder(std::string name) { g_.name = std::move(name); }

uint32_t Builder::input(const TensorType& type) {
  uint32_t v = g_.add_value(type);
  g_.inputs.push_back(v);
  return v;
}

uint32_t Builder::param(const TensorType& type, std::string name) {
  uint32_t v = g_.add_value(type);
  g_.params.push_back(v);
  g_.param_names.push_back(std::move(name));
  return v;
}

uint32_t Builder::constant(const Tensor& value) {
  KILN_CHECK(value.defined() && value.has_storage(), "Builder::constant: needs a tensor with data");
  Node n;
  n.kind = NodeKind::Const;
  n.constant = value.contiguous().clone();
  n.result = g_.add_value(value.type());
  g_.nodes.push_back(std::move(n));
  return g_.nodes.back().result;
}

uint32_t Builder::op(OpId id, std::vector<uint32_t> in, Attrs attrs) {
  for (uint32_t v : in)
    KILN_CHECK(v < g_.types.size(), "Builder::op: {} uses value {}, which does not exist", op_name(id), v);
  if (op_family(id) == OpFamily::Pointwise) {
    // The compute dtype: the first operand's that is not where's condition, else the numbers'.
    bool found = false;
    for (int k = 0; k < op_arity(id) && !found; ++k) {
      int t = input_of_slot(attrs.imm_mask, k);
      if (t < 0 || (id == OpId::Where && k == 0)) continue;
      attrs.dtype = g_.type(in.at(static_cast<size_t>(t))).dtype;
      found = true;
    }
    for (int k = 0; k < op_arity(id) && !found; ++k)
      if (attrs.imm_mask >> k & 1) attrs.dtype = attrs.imm[k].default_dtype(), found = true;
  }
  Node n;
  n.op = id;
  n.attrs = std::move(attrs);
  n.inputs = std::move(in);
  TensorType type = shapes_.infer(g_, n);  // throws naming the op when the operands don't fit
  n.result = g_.add_value(type);
  g_.nodes.push_back(std::move(n));
  return g_.nodes.back().result;
}

void Builder::assign(uint32_t param, uint32_t value) {
  Node n;
  n.kind = NodeKind::Assign;
  n.inputs = {param, value};
  g_.nodes.push_back(std::move(n));
}

void Builder::output(uint32_t value) { g_.outputs.push_back(value); }

Graph Builder::finish() {
  verify(g_);
  return std::move(g_);
}

}  // namespace kiln::ir
