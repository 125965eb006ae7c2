// ir/partition.cpp -- forward/backward partition of a joint graph by a minimum cut.
//
// The flow network has two vertices per forward value v, v.in and v.out, joined by an edge
// whose capacity is what saving v costs (its bytes; 0 for params, which stay live anyway).
// The source feeds every value the backward cannot compute itself (arguments, params, and the
// results of ops that are not cheap to redo); each forward op's operands feed its result
// (infinite capacity); every value the backward reads drains to the sink. A minimum cut then
// crosses only in->out edges: the values cut are saved, and every forward value the backward
// needs beyond them is recomputed there from them.
#include "ir/partition.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "ir/passes.h"
#include "runtime/check.h"

namespace kiln::ir {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

// Dinic's maximum flow on a small graph.
class MaxFlow {
 public:
  explicit MaxFlow(size_t n) : adj_(n), level_(n), next_(n) {}
  void add(size_t a, size_t b, int64_t cap) {
    adj_[a].push_back(edges_.size());
    edges_.push_back({b, cap});
    adj_[b].push_back(edges_.size());
    edges_.push_back({a, 0});
  }
  void run(size_t s, size_t t) {
    while (levels(s, t)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (push(s, t, kInf) > 0) {
      }
    }
  }
  /// After run(): the vertices still reachable from s in the residual graph.
  std::vector<char> source_side(size_t s) const {
    std::vector<char> seen(adj_.size(), 0);
    std::vector<size_t> stack{s};
    seen[s] = 1;
    while (!stack.empty()) {
      size_t a = stack.back();
      stack.pop_back();
      for (size_t e : adj_[a])
        if (edges_[e].cap > 0 && !seen[edges_[e].to]) seen[edges_[e].to] = 1, stack.push_back(edges_[e].to);
    }
    return seen;
  }

 private:
  struct Edge {
    size_t to;
    int64_t cap;
  };
  bool levels(size_t s, size_t t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<size_t> q;
    level_[s] = 0;
    q.push(s);
    while (!q.empty()) {
      size_t a = q.front();
      q.pop();
      for (size_t e : adj_[a])
        if (edges_[e].cap > 0 && level_[edges_[e].to] < 0) level_[edges_[e].to] = level_[a] + 1, q.push(edges_[e].to);
    }
    return level_[t] >= 0;
  }
  // Iterative would be safer for very deep graphs; forward graphs here are a few thousand
  // values at most, and each augmenting path is at most their length.
  int64_t push(size_t a, size_t t, int64_t f) {
    if (a == t) return f;
    for (size_t& i = next_[a]; i < adj_[a].size(); ++i) {
      Edge& e = edges_[adj_[a][i]];
      if (e.cap <= 0 || level_[e.to] != level_[a] + 1) continue;
      int64_t got = push(e.to, t, std::min(f, e.cap));
      if (got > 0) {
        e.cap -= got;
        edges_[adj_[a][i] ^ 1].cap += got;
        return got;
      }
    }
    return 0;
  }
  std::vector<std::vector<size_t>> adj_;
  std::vector<Edge> edges_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

int64_t bytes_of(const TensorType& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d < 0 ? 1024 : d;  // a symbolic dim: some size
  return std::max<int64_t>(1, n * static_cast<int64_t>(dtype_size(t.dtype)));
}

// Cheap to redo inside the backward's kernels: it reads only what it writes, element by element.
bool recomputable(const Node& n) {
  if (n.kind == NodeKind::Const) return true;
  if (n.kind != NodeKind::Op) return false;
  OpFamily f = op_family(n.op);
  return f == OpFamily::Pointwise || f == OpFamily::Cast || f == OpFamily::View;
}

}  // namespace

Partition partition(const Graph& joint, size_t num_args, size_t num_results, bool args_kept) {
  KILN_CHECK(num_args <= joint.inputs.size() && num_results <= joint.outputs.size(),
             "partition: @{} has {} inputs and {} outputs, fewer than {} arguments and {} results", joint.name,
             joint.inputs.size(), joint.outputs.size(), num_args, num_results);
  const size_t V = joint.types.size();
  std::vector<int> def(V, -1);  // value -> index of the node defining it
  for (size_t i = 0; i < joint.nodes.size(); ++i) {
    const Node& n = joint.nodes[i];
    KILN_CHECK(n.kind == NodeKind::Op || n.kind == NodeKind::Const,
               "partition: @{} holds {}: only op and const nodes can be split", joint.name, print_node(joint, n));
    def[n.result] = static_cast<int>(i);
  }
  // Backward values: those that depend on a result's gradient.
  std::vector<char> tangent(V, 0);
  for (size_t i = num_args; i < joint.inputs.size(); ++i) tangent[joint.inputs[i]] = 1;
  for (const Node& n : joint.nodes)
    for (uint32_t v : n.inputs) tangent[n.result] |= tangent[v];
  for (size_t i = 0; i < num_results; ++i)
    KILN_CHECK(!tangent[joint.outputs[i]], "partition: @{}: result {} depends on a gradient", joint.name, i);

  // Forward values the backward reads directly.
  std::vector<char> read_by_backward(V, 0);
  for (const Node& n : joint.nodes)
    if (tangent[n.result])
      for (uint32_t v : n.inputs) read_by_backward[v] |= !tangent[v];
  for (size_t i = num_results; i < joint.outputs.size(); ++i)
    read_by_backward[joint.outputs[i]] |= !tangent[joint.outputs[i]];

  std::vector<char> is_param(V, 0), is_arg(V, 0);
  for (uint32_t v : joint.params) is_param[v] = 1;
  for (size_t i = 0; i < num_args; ++i) is_arg[joint.inputs[i]] = 1;

  const size_t S = 2 * V, T = 2 * V + 1;
  MaxFlow flow(2 * V + 2);
  for (uint32_t v = 0; v < V; ++v) {
    if (tangent[v]) continue;
    bool bound = is_arg[v] || is_param[v];
    if (!bound && def[v] < 0) continue;  // an unused value id
    const Node* n = bound ? nullptr : &joint.nodes[static_cast<size_t>(def[v])];
    int64_t cost = is_param[v] || (args_kept && is_arg[v]) ? 0
                   : n && n->kind == NodeKind::Const       ? kInf
                                                           : bytes_of(joint.type(v));
    flow.add(2 * v, 2 * v + 1, cost);
    if (bound || !recomputable(*n)) flow.add(S, 2 * v, kInf);
    if (n)
      for (uint32_t u : n->inputs) flow.add(2 * u + 1, 2 * v, kInf);
    if (read_by_backward[v]) flow.add(2 * v + 1, T, kInf);
  }
  flow.run(S, T);
  std::vector<char> side = flow.source_side(S);

  Partition p;
  // Saved: cut in->out edges. Arguments and params first, in their order, then computed values.
  std::vector<char> saved(V, 0);
  for (uint32_t v = 0; v < V; ++v) saved[v] = !tangent[v] && side[2 * v] && !side[2 * v + 1];
  // What the backward reads: from its outputs back to saved values. A value the cut leaves
  // saved that nothing reads (an argument costing nothing: args_kept) is not saved.
  std::vector<char> needed(V, 0);
  for (size_t i = num_results; i < joint.outputs.size(); ++i) needed[joint.outputs[i]] = 1;
  for (size_t i = joint.nodes.size(); i-- > 0;) {
    const Node& n = joint.nodes[i];
    if (!needed[n.result] || saved[n.result]) continue;
    for (uint32_t u : n.inputs) needed[u] = 1;
  }
  for (uint32_t v = 0; v < V; ++v) saved[v] = saved[v] && needed[v];
  for (size_t i = 0; i < num_args; ++i)
    if (saved[joint.inputs[i]]) p.saved.push_back({SavedValue::Arg, i});
  for (size_t i = 0; i < joint.params.size(); ++i)
    if (saved[joint.params[i]]) p.saved.push_back({SavedValue::Param, i});

  // The forward: what the results and the saved values need.
  Graph& f = p.forward;
  f.name = joint.name;
  f.dim_names = joint.dim_names;
  f.types = joint.types;
  f.inputs.assign(joint.inputs.begin(), joint.inputs.begin() + static_cast<ptrdiff_t>(num_args));
  f.params = joint.params;
  f.param_names = joint.param_names;
  f.outputs.assign(joint.outputs.begin(), joint.outputs.begin() + static_cast<ptrdiff_t>(num_results));
  std::vector<uint32_t> saved_values;
  for (const SavedValue& s : p.saved)
    saved_values.push_back(s.kind == SavedValue::Arg ? f.inputs[s.index] : f.params[s.index]);
  for (const Node& n : joint.nodes) {
    if (!saved[n.result] || is_arg[n.result] || is_param[n.result]) continue;
    p.saved.push_back({SavedValue::Computed, f.outputs.size()});
    f.outputs.push_back(n.result);
    saved_values.push_back(n.result);
  }
  for (const Node& n : joint.nodes)
    if (!tangent[n.result]) f.nodes.push_back(n);
  f = dce(f);

  // The backward: every node of the gradient part, and forward nodes it needs that were not
  // saved (recomputed from saved ones).
  Graph& b = p.backward;
  b.name = joint.name + ".backward";
  b.dim_names = joint.dim_names;
  b.types = joint.types;
  b.inputs = saved_values;
  b.inputs.insert(b.inputs.end(), joint.inputs.begin() + static_cast<ptrdiff_t>(num_args), joint.inputs.end());
  b.outputs.assign(joint.outputs.begin() + static_cast<ptrdiff_t>(num_results), joint.outputs.end());
  for (const Node& n : joint.nodes) {
    if (!needed[n.result] || saved[n.result]) continue;
    if (!tangent[n.result]) {
      KILN_ASSERT(recomputable(n));
      if (n.kind == NodeKind::Op) p.recomputed.push_back(n.result);
    }
    b.nodes.push_back(n);
  }
  for (uint32_t v = 0; v < V; ++v) KILN_ASSERT(!needed[v] || tangent[v] || saved[v] || def[v] >= 0);
  return p;
}

}  // namespace kiln::ir
