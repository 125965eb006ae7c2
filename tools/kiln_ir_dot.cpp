// tools/kiln_ir_dot.cpp -- kiln-ir dot: the graph in Graphviz, numbered as the printer numbers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>

#include "tools/kiln_ir.h"

namespace kiln::tools {
namespace {

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

struct DotWriter {
  const ir::Graph& g;
  std::vector<int64_t> number;       // value id -> printed number, as print() numbers it
  std::vector<std::string> produce;  // value id -> dot node that defines it
  std::string out;
  int64_t next = 0;

  void define(uint32_t v, std::string node) {
    if (v >= number.size() || number[v] >= 0) return;
    number[v] = next++;
    produce[v] = std::move(node);
  }
  std::string name(uint32_t v) const {
    return v < number.size() && number[v] >= 0 ? fmt::format("%{}", number[v]) : "%?";
  }
  // node_key() with raw value ids replaced by printed numbers.
  std::string renumber(const std::string& key) const {
    std::string s;
    for (size_t i = 0; i < key.size(); ++i) {
      if (key[i] != '%' || i + 1 >= key.size() || !std::isdigit(static_cast<unsigned char>(key[i + 1]))) {
        s += key[i];
        continue;
      }
      uint64_t raw = 0;
      while (i + 1 < key.size() && std::isdigit(static_cast<unsigned char>(key[i + 1])) && raw < (uint64_t{1} << 40))
        raw = raw * 10 + static_cast<uint64_t>(key[++i] - '0');
      s += raw < number.size() ? name(static_cast<uint32_t>(raw)) : "%?";
    }
    return s;
  }
  void vertex(const std::string& id, const std::string& label, const char* style) {
    out += fmt::format("  {} [label=\"{}\", {}];\n", id, escape(label), style);
  }
  void edge(uint32_t v, const std::string& to, const char* extra = "") {
    if (v >= produce.size() || produce[v].empty()) return;
    out += fmt::format("  {} -> {} [label=\"{}\"{}];\n", produce[v], to, escape(g.type(v).str()), extra);
  }

  std::string op_label(const ir::Node& n) const {
    std::string key = renumber(ir::node_key(g, n));
    if (size_t brace = key.find(" {"); brace != std::string::npos)
      key = key.substr(0, brace) + "\n" + key.substr(brace + 1);
    return fmt::format("{} = {}", name(n.result), key);
  }
  std::string const_label(const ir::Node& n) const {
    std::string label = fmt::format("{} = const", name(n.result));
    const Tensor& c = n.constant;
    if (c.defined() && c.has_storage() && c.numel() <= 8) {
      std::string vals = fmt::format("{}", fmt::join(c.to_vector<double>(), ", "));
      label += c.dim() == 0 ? " " + vals : " [" + vals + "]";
    }
    return label + "\n" + g.type(n.result).str();
  }

  void run() {
    number.assign(g.types.size(), -1);
    produce.assign(g.types.size(), "");
    out += fmt::format("digraph \"{}\" {{\n", escape(g.name));
    out += "  node [fontname=\"monospace\", fontsize=10];\n";
    out += "  edge [fontname=\"monospace\", fontsize=9];\n";
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      std::string id = fmt::format("in{}", i);
      define(g.inputs[i], id);
      vertex(id, fmt::format("input {}\n{}", name(g.inputs[i]), g.type(g.inputs[i]).str()),
             "shape=invhouse, style=filled, fillcolor=\"#cfe2ff\"");
    }
    for (size_t i = 0; i < g.params.size(); ++i) {
      std::string id = fmt::format("p{}", i);
      define(g.params[i], id);
      std::string label = i < g.param_names.size() ? g.param_names[i] : "";
      vertex(
          id,
          fmt::format("param {}{}\n{}", name(g.params[i]), label.empty() ? "" : " " + label, g.type(g.params[i]).str()),
          "shape=cylinder, style=filled, fillcolor=\"#fff3cd\"");
    }
    for (size_t i = 0; i < g.nodes.size(); ++i) node(i, g.nodes[i]);
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      std::string id = fmt::format("out{}", i);
      vertex(id, fmt::format("output {}", i), "shape=house, style=filled, fillcolor=\"#d1e7dd\"");
      edge(g.outputs[i], id);
    }
    out += "}\n";
  }

  void node(size_t i, const ir::Node& n) {
    std::string id = fmt::format("n{}", i);
    std::string loc = n.loc.known() ? fmt::format("\n{}:{}", n.loc.file, n.loc.line) : "";
    if (n.kind == ir::NodeKind::Assign) {
      vertex(id, "assign" + loc, "shape=box, style=dashed");
      if (n.inputs.size() == 2) {
        edge(n.inputs[1], id);
        if (n.inputs[0] < produce.size() && !produce[n.inputs[0]].empty())
          out +=
              fmt::format("  {} -> {} [style=dashed, label=\"writes\", constraint=false];\n", id, produce[n.inputs[0]]);
      }
      return;
    }
    if (n.result != ir::kNoValue) define(n.result, id);
    if (n.kind == ir::NodeKind::Const)
      vertex(id, const_label(n) + loc, "shape=box, style=\"rounded,filled\", fillcolor=\"#e9ecef\"");
    else if (n.kind == ir::NodeKind::Op) vertex(id, op_label(n) + loc, "shape=box");
    else  // another kind of node: the first line of its text
      vertex(id, renumber(first_line(ir::print_node(g, n))) + loc, "shape=box, style=bold");
    for (uint32_t v : n.inputs) edge(v, id);
  }
};

}  // namespace

std::string to_dot(const ir::Graph& g) {
  DotWriter w{g, {}, {}, {}};
  w.run();
  return w.out;
}

}  // namespace kiln::tools
