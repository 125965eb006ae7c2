// ir/printer.cpp -- the IR's text form. Deterministic: values are renumbered densely in
// definition order, attributes print in one fixed order, numbers in their shortest exact form.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ostream>
#include <type_traits>
#include <variant>

#include "ir/graph.h"
#include "runtime/check.h"
#include "runtime/registered_op.h"

namespace kiln::ir {
namespace {

// A float literal that reads back as the same value and always looks like a float.
template <class T> std::string float_literal(T v) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";  // x86's default NaN is -nan
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A string as the parser reads it back: quoted, with '"', '\' and every byte outside printable
// ASCII escaped (\xNN), so a name or file holding anything round-trips.
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (u < 0x20 || u >= 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  return out + '"';
}

// A graph's name after '@': bare when it is a word the lexer reads whole, else quoted.
std::string global_name(std::string_view name) {
  bool bare = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  });
  return bare ? std::string(name) : quoted(name);
}

std::string scalar_literal(const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool: return s.to<bool>() ? "true" : "false";
    case Scalar::Kind::Int: return std::to_string(s.to_int());
    case Scalar::Kind::Float: return float_literal(s.to_double());
  }
  return "?";
}

// Attribute lists are plain integers (axes may be negative; -1 means "the last").
std::string dims_literal(const Dims& d) { return fmt::format("[{}]", fmt::join(d, ",")); }

struct Printer {
  const Graph& g;
  PrintOptions opt;
  std::vector<int64_t> number;  // value id -> printed number
  int64_t next = 0;
  std::string out;

  bool dollar_inputs = false;  // a fused body: its inputs print as $0, $1, ...

  std::string name(uint32_t v) const {
    KILN_ASSERT(v < number.size());
    if (dollar_inputs)
      for (size_t k = 0; k < g.inputs.size(); ++k)
        if (g.inputs[k] == v) return fmt::format("${}", k);
    return number[v] >= 0 ? fmt::format("%{}", number[v]) : fmt::format("%<undefined {}>", v);
  }
  void define(uint32_t v) {
    if (v < number.size() && number[v] < 0) number[v] = next++;
  }

  std::string operands(const Node& n) const {
    std::vector<std::string> parts;
    if (op_family(n.op) == OpFamily::Pointwise) {
      for (int k = 0; k < op_arity(n.op); ++k) {
        int t = input_of_slot(n.attrs.imm_mask, k);
        if (t < 0) parts.push_back(scalar_literal(n.attrs.imm[k]));
        else if (static_cast<size_t>(t) < n.inputs.size()) parts.push_back(name(n.inputs[static_cast<size_t>(t)]));
      }
    } else {
      for (uint32_t v : n.inputs) parts.push_back(name(v));
    }
    return fmt::format("{}", fmt::join(parts, ", "));
  }

  // The attributes the op reads, as runtime/attrs.def lists and orders them.
  // The op, its operands (iota has none) and its attributes.
  std::string op_text(const Node& n) const {
    std::string ops = operands(n);
    return fmt::format("{}{}{}{}", op_name(n.op, n.attrs), ops.empty() ? "" : " ", ops, attrs(n));
  }

  std::string attrs(const Node& n) const {
    if (n.op == OpId::Registered && n.attrs.registered && n.attrs.registered->op)
      return registered_attrs(*n.attrs.registered);
    uint64_t mask = op_def(n.op).attrs;
    std::vector<std::string> parts;
    for (int i = 0; i < kNumAttrs; ++i) {
      const AttrSchema& s = attr_schema(i);
      if ((mask & s.field) && !((kOptionalAttrs & s.field) && is_default(n.attrs, i)))
        parts.push_back(fmt::format("{}={}", s.name,
                                    visit_attr(n.attrs, i, [&](const auto& v) { return attr_literal(v, s.kind); })));
    }
    return parts.empty() ? "" : fmt::format(" {{{}}}", fmt::join(parts, ", "));
  }

  // A registered op's attributes: every one, by its schema's names and in its order (a call
  // holding fewer values, which the verifier reports, prints the ones it has).
  static std::string registered_attrs(const RegisteredCall& call) {
    std::vector<std::string> parts;
    size_t k = 0;
    for (const OpSchemaArg& a : call.op->schema().args) {
      if (a.type == OpArgType::Tensor) continue;
      if (k == call.values.size()) break;
      std::string value = std::visit(
          [](const auto& v) -> std::string {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, double>) return float_literal(v);
            else if constexpr (std::is_same_v<T, std::vector<double>>) {
              std::vector<std::string> items;
              for (double d : v) items.push_back(float_literal(d));
              return fmt::format("[{}]", fmt::join(items, ","));
            } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return fmt::format("[{}]", fmt::join(v, ","));
            else if constexpr (std::is_same_v<T, std::string>) return quoted(v);
            else return attr_literal(v, AttrKind::Int);
          },
          call.values[k++]);
      parts.push_back(fmt::format("{}={}", a.name, value));
    }
    return parts.empty() ? "" : fmt::format(" {{{}}}", fmt::join(parts, ", "));
  }

  template <class T> static std::string attr_literal(const T& v, AttrKind kind) {
    if constexpr (std::is_same_v<T, Dims>) return kind == AttrKind::Sizes ? shape_str(v) : dims_literal(v);
    else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
    else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
    else if constexpr (std::is_same_v<T, DType>) return std::string(dtype_name(v));
    else if constexpr (std::is_same_v<T, Scalar>) return scalar_literal(v);
    else if constexpr (std::is_same_v<T, Device>) return v.str();
    else if constexpr (std::is_same_v<T, Combine>) return std::string(combine_name(v));
    else static_assert(!sizeof(T), "an attribute type the IR cannot write: add it here and to the parser");
  }

  std::string constant(const Tensor& t) const {
    std::vector<std::string> vals;
    if (is_float(t.dtype())) {
      if (t.dtype() == DType::F64) {
        for (double v : t.to_vector<double>()) vals.push_back(float_literal(v));
      } else {
        for (float v : t.to_vector<float>()) vals.push_back(float_literal(v));
      }
    } else if (t.dtype() == DType::Bool) {
      for (bool v : t.to_vector<bool>()) vals.push_back(v ? "true" : "false");
    } else {
      for (int64_t v : t.to_vector<int64_t>()) vals.push_back(std::to_string(v));
    }
    if (t.dim() == 0) return vals.at(0);
    return fmt::format("[{}]", fmt::join(vals, ", "));
  }

  std::string location(const Node& n) const {
    if (!opt.locations || !n.loc.known()) return "";
    return fmt::format(" loc({}:{})", quoted(n.loc.file), n.loc.line);
  }

  std::string node(const Node& n) const {
    switch (n.kind) {
      case NodeKind::Assign:
        return fmt::format("assign {}, {}{}", name(n.inputs.at(0)), name(n.inputs.at(1)), location(n));
      case NodeKind::Const:
        return fmt::format("{} = const {} : {}{}", name(n.result), constant(n.constant), g.type(n.result).str(),
                           location(n));
      case NodeKind::Op:
        return fmt::format("{} = {} : {}{}", name(n.result), op_text(n), g.type(n.result).str(), location(n));
      case NodeKind::Fused: {
        std::vector<std::string> ins;
        for (uint32_t v : n.inputs) ins.push_back(name(v));
        std::vector<std::string> rs, ts;
        for (uint32_t v : n.results) {
          rs.push_back(name(v));
          ts.push_back(g.type(v).str());
        }
        std::string head = fmt::format("{} = fused {} : {}{}", fmt::join(rs, ", "), fmt::join(ins, ", "),
                                       fmt::join(ts, ", "), location(n));
        if (!n.body) return head + " {<no body>}";
        return head + " {\n" + body(*n.body) + indent + "}";
      }
    }
    return "";
  }

  // A fused group's nodes, one level deeper, numbered in their own scope.
  std::string body(const Graph& b) const {
    Printer p{b, opt, {}, 0, {}};
    p.dollar_inputs = true;
    p.indent = indent + "  ";
    p.number.assign(b.types.size(), -1);
    std::string text;
    for (const Node& n : b.nodes) {
      if (n.result != kNoValue) p.define(n.result);
      text += p.indent + p.node(n) + "\n";
    }
    std::vector<std::string> ys;
    for (uint32_t v : b.outputs) ys.push_back(p.name(v));
    return text + p.indent + fmt::format("yield {}\n", fmt::join(ys, ", "));
  }
  std::string indent = "  ";  // of the line this printer's nodes start on

  void run() {
    number.assign(g.types.size(), -1);
    std::vector<std::string> ins, params, outs;
    for (uint32_t v : g.inputs) {
      define(v);
      ins.push_back(fmt::format("{}: {}", name(v), g.type(v).str()));
    }
    for (size_t i = 0; i < g.params.size(); ++i) {
      define(g.params[i]);
      std::string label = i < g.param_names.size() && !g.param_names[i].empty() ? " " + quoted(g.param_names[i]) : "";
      params.push_back(fmt::format("{}: {}{}", name(g.params[i]), g.type(g.params[i]).str(), label));
    }
    for (uint32_t v : g.outputs) outs.push_back(g.type(v).str());
    out += fmt::format("graph @{}({})", global_name(g.name), fmt::join(ins, ", "));
    if (!params.empty()) out += fmt::format(" params({})", fmt::join(params, ", "));
    out += fmt::format(" -> ({}) {{\n", fmt::join(outs, ", "));
    for (const Node& n : g.nodes) {
      for (uint32_t v : defined_values(n)) define(v);
      out += "  " + node(n) + "\n";
    }
    std::vector<std::string> rets;
    for (uint32_t v : g.outputs) rets.push_back(name(v));
    out += fmt::format("  return{}{}\n}}\n", rets.empty() ? "" : " ", fmt::join(rets, ", "));
  }
};

}  // namespace

std::string print(const Graph& g, const PrintOptions& options) {
  DimNamesScope names(&g.dim_names);
  Printer p{g, options, {}, 0, {}};
  p.run();
  return p.out;
}

std::ostream& operator<<(std::ostream& os, const Graph& g) { return os << print(g); }

std::string print_node(const Graph& g, const Node& n) {
  DimNamesScope names(&g.dim_names);
  Printer p{g, {}, {}, 0, {}};
  p.number.assign(g.types.size(), -1);
  for (size_t v = 0; v < g.types.size(); ++v) p.number[v] = static_cast<int64_t>(v);  // raw ids
  return p.node(n);
}

std::string node_key(const Graph& g, const Node& n) {
  Printer p{g, {}, {}, 0, {}};
  p.number.resize(g.types.size());
  for (size_t v = 0; v < g.types.size(); ++v) p.number[v] = static_cast<int64_t>(v);
  return p.op_text(n);
}

DType pointwise_compute_dtype(const Graph& g, const Node& n) {
  for (int k = 0; k < op_arity(n.op); ++k) {
    int t = input_of_slot(n.attrs.imm_mask, k);
    if (t >= 0 && !(n.op == OpId::Where && k == 0)) return g.type(n.inputs.at(static_cast<size_t>(t))).dtype;
  }
  // Numbers only: a comparison computes in their common dtype, other ops in their result's.
  Promote p = op_def(n.op).promote;
  if (p != Promote::Compare && p != Promote::Logical) return g.type(n.result).dtype;
  DType d = DType::Bool;
  for (int k = 0; k < op_arity(n.op); ++k)
    if (n.attrs.imm_mask >> k & 1) d = promote(d, n.attrs.imm[k].default_dtype());
  return d;
}

}  // namespace kiln::ir
