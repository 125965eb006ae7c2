// ir/verify.cpp -- checks a graph against the IR's rules (ir/graph.h). The type check re-runs
// each op's shape rule on data-less tensors, so the IR and eager mode cannot disagree.
#include <fmt/format.h>

#include <algorithm>

#include "ir/graph.h"
#include "ir/shape_inference.h"
#include "runtime/check.h"

namespace kiln::ir {
void verify(const Graph& g) {
  DimNamesScope names(&g.dim_names);  // messages name g's symbolic dims
  std::vector<bool> defined(g.types.size(), false);
  auto fail_node = [&](size_t i, const std::string& what) {
    // The line the node has in print(g): the header, then every earlier node's lines.
    size_t line = 2;
    for (size_t j = 0; j < i; ++j) {
      std::string t = print_node(g, g.nodes[j]);
      line += 1 + static_cast<size_t>(std::count(t.begin(), t.end(), '\n'));
    }
    throw Error(fmt::format("verify: @{}: node {} ({}): {} [line {} of the printed graph]", g.name, i,
                            print_node(g, g.nodes[i]), what, line));
  };
  auto fail = [&](const std::string& what) { throw Error(fmt::format("verify: @{}: {}", g.name, what)); };
  auto bind = [&](uint32_t v, const char* what) {
    if (v >= g.types.size()) fail(fmt::format("{} refers to value {} of {}", what, v, g.types.size()));
    if (defined[v]) fail(fmt::format("value {} is defined twice", v));
    defined[v] = true;
  };
  for (uint32_t v : g.inputs) bind(v, "an input");
  for (uint32_t v : g.params) bind(v, "a parameter");
  if (!g.param_names.empty() && g.param_names.size() != g.params.size())
    fail(fmt::format("{} parameter names for {} parameters", g.param_names.size(), g.params.size()));

  ShapeInference shapes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (uint32_t v : n.inputs) {
      if (v >= g.types.size()) fail(fmt::format("node {} uses value {} of {}", i, v, g.types.size()));
      if (!defined[v]) fail_node(i, fmt::format("uses %{} before it is defined", v));
    }
    switch (n.kind) {
      case NodeKind::Assign: {
        if (n.inputs.size() != 2) fail_node(i, "assign takes a parameter and a value");
        bool is_param = false;
        for (uint32_t p : g.params) is_param = is_param || p == n.inputs[0];
        if (!is_param) fail_node(i, "assign writes only to parameters");
        if (!(g.type(n.inputs[0]) == g.type(n.inputs[1])))
          fail_node(i, fmt::format("assigns {} to a parameter of type {}", g.type(n.inputs[1]).str(),
                                   g.type(n.inputs[0]).str()));
        continue;
      }
      case NodeKind::Const: {
        bind(n.result, "a constant");
        const Tensor& c = n.constant;
        if (!c.defined() || !c.has_storage() || !(c.type() == g.type(n.result)) || !c.is_contiguous())
          fail_node(i, fmt::format("constant data {} does not match its type {}",
                                   c.defined() ? c.type().str() : "missing", g.type(n.result).str()));
        continue;
      }
      case NodeKind::Fused: {
        if (!n.body) fail_node(i, "a fused group needs a body");
        const Graph& b = *n.body;
        if (n.results.empty() || n.result != n.results[0])
          fail_node(i, "a fused group defines at least one value, the first as its result");
        if (b.inputs.size() != n.inputs.size() || !b.params.empty() || b.outputs.size() != n.results.size())
          fail_node(i, fmt::format("its body takes {} operands and yields {} values; expected {} and {}",
                                   b.inputs.size(), b.outputs.size(), n.inputs.size(), n.results.size()));
        for (size_t k = 0; k < n.inputs.size(); ++k)
          if (!(b.type(b.inputs[k]) == g.type(n.inputs[k])))
            fail_node(i, fmt::format("body operand ${} is {} but the operand is {}", k, b.type(b.inputs[k]).str(),
                                     g.type(n.inputs[k]).str()));
        for (const Node& bn : b.nodes) {
          if (bn.kind != NodeKind::Op && bn.kind != NodeKind::Const)
            fail_node(i, "a fused body holds only op and const nodes (no assign, no nested group)");
          if (bn.kind == NodeKind::Op && bn.op == OpId::Registered)
            fail_node(i, fmt::format("a fused body holds no registered op ({} runs on its own kernels)",
                                     op_name(bn.op, bn.attrs)));
        }
        try {
          verify(b);
        } catch (const Error& e) {
          fail_node(i, e.what());
        }
        for (size_t k = 0; k < n.results.size(); ++k) {
          if (n.results[k] >= g.types.size()) fail_node(i, "defines a value out of range");
          if (!(b.type(b.outputs[k]) == g.type(n.results[k])))
            fail_node(i, fmt::format("its result {} is {} but its body yields {}", k, g.type(n.results[k]).str(),
                                     b.type(b.outputs[k]).str()));
          bind(n.results[k], "a fused group");
        }
        continue;
      }
      case NodeKind::Op: break;
    }
    int arity = op_arity(n.op);
    int imms = __builtin_popcount(n.attrs.imm_mask);
    if (op_family(n.op) != OpFamily::Pointwise && n.attrs.imm_mask)
      fail_node(i, "only pointwise ops take numbers as operands");
    if (arity >= 0 && static_cast<int>(n.inputs.size()) + imms != arity)
      fail_node(i, fmt::format("{} takes {} operands, has {}", op_name(n.op, n.attrs), arity, n.inputs.size() + imms));
    if (arity < 0 && n.inputs.empty())
      fail_node(i, fmt::format("{} needs at least one operand", op_name(n.op, n.attrs)));
    TensorType want;
    try {
      want = shapes.infer(g, n);
    } catch (const Error& e) {
      fail_node(i, e.what());
    }
    if (!shapes.matches(g, want, g.type(n.result)))
      fail_node(
          i, fmt::format("its type is {} but {} gives {}", g.type(n.result).str(), op_name(n.op, n.attrs), want.str()));
    bind(n.result, "a node");
  }
  for (uint32_t v : g.outputs) {
    if (v >= g.types.size() || !defined[v]) fail(fmt::format("returns value {}, which is not defined", v));
  }
}

}  // namespace kiln::ir
