// jit/run.cpp -- run_graph: one eager apply() per op node, assigns applied at the end.
#include "jit/run.h"

#include <unordered_set>

#include "autograd/autograd.h"
#include "ir/graph.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"

namespace kiln::jit {

std::vector<Tensor> run_graph(const ir::Graph& g, std::span<const Tensor> inputs,
                              std::span<const Tensor> params) {
  KILN_CHECK(inputs.size() == g.inputs.size(), "run_graph: @{} takes {} inputs, got {}", g.name,
             g.inputs.size(), inputs.size());
  KILN_CHECK(params.size() == g.params.size(), "run_graph: @{} takes {} params, got {}", g.name,
             g.params.size(), params.size());
  std::vector<Tensor> vals(g.types.size());
  for (size_t i = 0; i < inputs.size(); ++i) vals[g.inputs[i]] = inputs[i];
  for (size_t i = 0; i < params.size(); ++i) vals[g.params[i]] = params[i];
  std::vector<std::pair<size_t, uint32_t>> assigns;  // (param index, value), applied at the end
  std::unordered_set<const Storage*> constants;
  bool caller_grad = grad_enabled();
  for (const ir::Node& n : g.nodes) {
    switch (n.kind) {
      case ir::NodeKind::Const:
        vals[n.result] = n.constant;
        constants.insert(n.constant.impl()->storage.get());
        break;
      case ir::NodeKind::Assign: {
        size_t p = 0;
        while (p < g.params.size() && g.params[p] != n.inputs[0]) ++p;
        KILN_CHECK(p < g.params.size(), "run_graph: @{}: assign to a value that is no param",
                   g.name);
        assigns.emplace_back(p, n.inputs[1]);
        break;
      }
      case ir::NodeKind::Fused: {  // the reference semantics of a group: its body, op by op
        std::vector<Tensor> in;
        for (uint32_t v : n.inputs) in.push_back(vals[v]);
        std::vector<Tensor> outs = run_graph(*n.body, in, {});
        for (size_t k = 0; k < n.results.size(); ++k) vals[n.results[k]] = outs.at(k);
        break;
      }
      case ir::NodeKind::Op: {
        std::vector<Tensor> in;
        in.reserve(n.inputs.size());
        for (uint32_t v : n.inputs) in.push_back(vals[v]);
        GradModeGuard mode(caller_grad && n.grad);
        vals[n.result] = apply(n.op, in, n.attrs);
        break;
      }
    }
  }
  // An output that is an argument or a parameter itself (a pass may have removed the op that
  // copied it, `w * 1`) is copied before the assigns run: it holds the value from before them.
  std::unordered_set<uint32_t> bound(g.inputs.begin(), g.inputs.end());
  bound.insert(g.params.begin(), g.params.end());
  std::vector<Tensor> early(g.outputs.size());
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (bound.count(g.outputs[i])) early[i] = vals[g.outputs[i]].detach().clone();
  {
    NoGradGuard no_grad;
    for (auto [p, v] : assigns) {
      Tensor target = params[p];
      target.copy_(vals[v]);
    }
  }
  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (early[i].defined()) {
      out.push_back(early[i]);
      continue;
    }
    // A copy of a constant (or of a view of one): the caller may write into what it gets.
    const Tensor& t = vals[g.outputs[i]];
    bool constant = t.has_storage() && constants.count(t.impl()->storage.get());
    out.push_back(constant ? t.clone() : t);
  }
  return out;
}

}  // namespace kiln::jit
