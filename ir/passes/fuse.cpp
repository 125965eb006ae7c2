// ir/passes/fuse.cpp -- form fused groups (ir/fusion.h): pointwise ops and casts, the
// broadcasts between them, and reductions, grouped so each group runs as one kernel.
//
// Greedy, in topological order: a node joins the group of one of its operands when it fits
// that group's domain (full size, or the reduced size after a trailing reduction) and joining
// makes no cycle between groups; otherwise a pointwise op or reduction starts a group of its
// own. Views of values from outside stay outside (a kernel reads any strided view in place);
// matmul, conv and data movement stay ops. A group that ends up with fewer than two compute ops
// is dissolved: one op runs as fast eagerly, unless it is a reduction beside a group that
// reduces the same value over the same axes (then it joins that group: one pass over the value).
// On a GPU (FuseOptions::recompute_small), a pointwise group over a small domain that feeds
// groups over larger ones is recomputed inside each of them (below), a lone op too. Groups become Fused nodes,
// one result per value used outside the group, placed so every value is defined before its uses.
#include <algorithm>
#include <functional>
#include <set>

#include "ir/fusion.h"
#include "ir/passes.h"
#include "runtime/check.h"
#include "runtime/type_rules.h"

namespace kiln::ir {

bool fusible_dtype(DType t) { return t != DType::F16 && t != DType::BF16; }

bool fusible_reduction(OpId op) {
  return op_def(op).combine != Combine::None;
}

namespace {

Dims keepdim_shape(const Dims& domain, const Dims& axes) {
  Dims s = domain;
  for (int64_t a : axes) s[a] = 1;
  return s;
}

// The domain without the reduced axes: a reduction's result with keepdim=false.
Dims squeezed_shape(const Dims& domain, const Dims& axes) {
  Dims s;
  for (size_t d = 0; d < domain.size(); ++d)
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end()) s.push_back(domain[d]);
  return s;
}

bool is_suffix(const Dims& axes, size_t rank) {
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != static_cast<int64_t>(rank - axes.size() + k)) return false;
  return true;
}

Dims reduce_axes(const Graph& g, const Node& n) {
  const Dims& in = g.type(n.inputs[0]).shape;
  Dims axes = normalize_axes(n.attrs.axes, static_cast<int64_t>(in.size()), op_name(n.op));
  std::sort(axes.begin(), axes.end());
  return axes;
}

enum class Space : uint8_t { Outside, Full, Reduced };

struct Group {
  std::vector<size_t> members;  // node indices, in order
  Dims domain;
  bool has_reduction = false;
  Dims axes;
  bool trailing = true;
  int compute = 0;  // pointwise ops, casts and reductions
};

struct Fuser {
  const Graph& g;
  const FuseOptions& opt;
  std::vector<int> group_of_node;      // -1: stays an op
  std::vector<int> group_of_value;     // -1: defined outside any group
  std::vector<Space> space;            // per value
  std::vector<Group> groups;
  std::vector<int> producer;           // value -> node index, -1 for inputs and params
  // Per group: the nodes of small groups it recomputes (sorted), and their results.
  std::vector<std::vector<size_t>> recomputed;
  std::vector<std::set<uint32_t>> recomputed_values;

  Fuser(const Graph& graph, const FuseOptions& o) : g(graph), opt(o) {
    group_of_node.assign(g.nodes.size(), -1);
    group_of_value.assign(g.types.size(), -1);
    space.assign(g.types.size(), Space::Outside);
    producer.assign(g.types.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (uint32_t v : defined_values(g.nodes[i])) producer[v] = static_cast<int>(i);
  }

  bool fusible(const Node& n) const {
    if (n.kind != NodeKind::Op || (opt.keep_out && opt.keep_out(n))) return false;
    // f16/bf16 pointwise work and casts fuse (computed in f32, rounded where eager rounds);
    // reductions of them stay eager.
    if (fusible_reduction(n.op)) {
      if (!fusible_dtype(g.type(n.result).dtype)) return false;
      for (uint32_t v : n.inputs)
        if (!fusible_dtype(g.type(v).dtype)) return false;
    }
    for (int64_t d : g.type(n.result).shape)
      if (is_symbol(d)) return false;
    // A group runs on one device: every operand on the result's, but for scalar constants,
    // which are copied into the body as numbers (a CPU scalar input on a CUDA op stays eager,
    // where the CPU-scalar rule makes it a number). So groups never mix devices.
    const Device device = g.type(n.result).device;
    if (opt.has_kernels && !opt.has_kernels(device)) return false;
    for (uint32_t v : n.inputs)
      if (g.type(v).device != device && !scalar_constant(v)) return false;
    OpFamily f = op_family(n.op);
    if (f == OpFamily::Pointwise) return true;
    return f == OpFamily::Cast || fusible_reduction(n.op) || n.op == OpId::Reshape || n.op == OpId::Expand;
  }

  // A one-element constant: fused_node copies it into the body.
  bool scalar_constant(uint32_t v) const {
    int p = producer[v];
    return p >= 0 && g.nodes[static_cast<size_t>(p)].kind == NodeKind::Const &&
           g.nodes[static_cast<size_t>(p)].constant.numel() == 1;
  }

  // Whether some value reachable backwards from `v` (through ops and other groups, not through
  // group `target` itself) belongs to group `target`: then `v` depends on it.
  bool depends_on(uint32_t v, int target) const {
    std::vector<char> seen_node(g.nodes.size(), 0), seen_group(groups.size(), 0);
    std::vector<uint32_t> stack{v};
    while (!stack.empty()) {
      uint32_t u = stack.back();
      stack.pop_back();
      int p = producer[u];
      if (p < 0) continue;
      int gu = group_of_node[p];
      if (gu == target) return true;
      if (gu >= 0) {
        if (seen_group[gu]) continue;
        seen_group[gu] = 1;
        for (size_t m : groups[gu].members)
          for (uint32_t w : g.nodes[m].inputs) stack.push_back(w);
      } else {
        if (seen_node[p]) continue;
        seen_node[p] = 1;
        for (uint32_t w : g.nodes[p].inputs) stack.push_back(w);
      }
    }
    return false;
  }

  // The space node `n` would have in group `gi`, or Outside when it cannot join.
  Space fit(const Node& n, int gi) const {
    const Group& G = groups[gi];
    const Dims& shape = g.type(n.result).shape;
    Dims reduced = G.has_reduction ? keepdim_shape(G.domain, G.axes) : Dims{};
    auto inside = [&](uint32_t v) { return group_of_value[v] == gi; };
    // A reduced operand is usable only after a trailing reduction, in its keepdim form.
    auto operand_ok = [&](uint32_t v) {
      if (!inside(v) || space[v] == Space::Full) return true;
      return G.trailing && g.type(v).shape == reduced;
    };
    OpFamily f = op_family(n.op);
    // Work on reduced values without their kept dims (sum(x, {-1}) * 2): reduced space, reading
    // only such values of the group and numbers (an outside [N] would broadcast against the
    // domain's last dim, not its kept one).
    if ((f == OpFamily::Pointwise || f == OpFamily::Cast) && G.has_reduction && G.trailing &&
        shape == squeezed_shape(G.domain, G.axes) && shape != reduced) {
      bool any = false;
      for (uint32_t v : n.inputs) {
        if (inside(v)) {
          if (space[v] != Space::Reduced || g.type(v).shape != shape) return Space::Outside;
          any = true;
        } else if (g.type(v).shape.product() != 1) {
          return Space::Outside;
        }
      }
      return any ? Space::Reduced : Space::Outside;
    }
    if (f == OpFamily::Pointwise || f == OpFamily::Cast || n.op == OpId::Expand) {
      for (uint32_t v : n.inputs)
        if (!operand_ok(v)) return Space::Outside;
      if (n.op == OpId::Expand && !inside(n.inputs[0])) return Space::Outside;  // a view: stays out
      if (shape == G.domain) return Space::Full;
      if (G.has_reduction && G.trailing && shape == reduced) {
        for (uint32_t v : n.inputs)
          if (inside(v) && space[v] != Space::Reduced) return Space::Outside;
        return Space::Reduced;
      }
      return Space::Outside;
    }
    if (n.op == OpId::Reshape) {  // only the keepdim form of a reduced value
      uint32_t v = n.inputs[0];
      if (!inside(v) || space[v] != Space::Reduced || !G.trailing || shape != reduced) return Space::Outside;
      return Space::Reduced;
    }
    if (fusible_reduction(n.op)) {
      uint32_t v = n.inputs[0];
      if (!inside(v) || space[v] != Space::Full || g.type(v).shape != G.domain) return Space::Outside;
      Dims axes = reduce_axes(g, n);
      if (G.has_reduction && axes != G.axes) return Space::Outside;
      return Space::Reduced;
    }
    return Space::Outside;
  }

  void join(size_t i, int gi, Space s) {
    const Node& n = g.nodes[i];
    Group& G = groups[gi];
    G.members.push_back(i);
    group_of_node[i] = gi;
    group_of_value[n.result] = gi;
    space[n.result] = s;
    OpFamily f = op_family(n.op);
    if (f == OpFamily::Pointwise || f == OpFamily::Cast || fusible_reduction(n.op)) ++G.compute;
    if (fusible_reduction(n.op) && !G.has_reduction) {
      G.has_reduction = true;
      G.axes = reduce_axes(g, n);
      G.trailing = is_suffix(G.axes, G.domain.size());
    }
  }

  // Merges group h into group gi when they share a domain, at most one has a reduction, and
  // neither reaches the other through outside nodes (gelu: 0.5 * x and the tanh chain of x;
  // x * y feeding a sum that another operand's group started). The pointwise group's values
  // are full size; the merge must leave the reduced space's rules intact: reduced-space work
  // reads no full value, and full-size work reads reduced values only in keepdim form after
  // a trailing reduction.
  void merge(int gi, int h) {
    if (h < 0 || h == gi) return;
    Group& G = groups[gi];
    Group& H = groups[h];
    if ((G.has_reduction && H.has_reduction) || G.domain != H.domain || H.members.empty()) return;
    if (G.has_reduction || H.has_reduction) {
      const Group& R = G.has_reduction ? G : H;
      int r = G.has_reduction ? gi : h, p = G.has_reduction ? h : gi;
      const Group& P = G.has_reduction ? H : G;
      Dims keepdim = keepdim_shape(R.domain, R.axes);
      for (size_t m : P.members)
        for (uint32_t w : g.nodes[m].inputs)
          if (group_of_value[w] == r && space[w] == Space::Reduced && !(R.trailing && g.type(w).shape == keepdim)) return;
      for (size_t m : R.members) {
        if (space[g.nodes[m].result] != Space::Reduced) continue;
        for (uint32_t w : g.nodes[m].inputs)
          if (group_of_value[w] == p && !fusible_reduction(g.nodes[m].op)) return;
      }
      if (!R.trailing)  // after a leading reduction nothing reads the reduced values
        for (size_t m : P.members)
          for (uint32_t w : g.nodes[m].inputs)
            if (group_of_value[w] == r && space[w] == Space::Reduced) return;
    }
    if (reaches(H, h, gi) || reaches(G, gi, h)) return;
    absorb(gi, h);
  }

  // Whether group `from` reads, through nodes outside both groups, a value that depends on `to`.
  bool reaches(const Group& from, int from_id, int to) const {
    for (size_t m : from.members)
      for (uint32_t w : g.nodes[m].inputs) {
        int gw = group_of_value[w];
        if (gw != from_id && gw != to && depends_on(w, to)) return true;
      }
    return false;
  }

  // Moves group h's members into group gi.
  void absorb(int gi, int h) {
    Group& G = groups[gi];
    Group& H = groups[h];
    for (size_t m : H.members) {
      group_of_node[m] = gi;
      group_of_value[g.nodes[m].result] = gi;
    }
    G.members.insert(G.members.end(), H.members.begin(), H.members.end());
    std::sort(G.members.begin(), G.members.end());
    G.compute += H.compute;
    if (H.has_reduction) {
      G.has_reduction = true;
      G.axes = H.axes;
      G.trailing = H.trailing;
    }
    H.members.clear();
    H.compute = 0;
  }

  // A lone reduction of a value that a group reducing over the same domain and axes reads too
  // joins that group: batch norm's backward reduces dy alone (the bias's gradient) and dy * x_hat
  // (the weight's) over the same axes, one pass over dy instead of two.
  void merge_sibling_reductions() {
    for (size_t h = 0; h < groups.size(); ++h) {
      Group& H = groups[h];
      if (H.members.size() != 1 || !H.has_reduction) continue;
      uint32_t v = g.nodes[H.members[0]].inputs[0];
      for (size_t gi = 0; gi < groups.size(); ++gi) {
        Group& G = groups[gi];
        if (gi == h || !G.has_reduction || G.domain != H.domain || G.axes != H.axes) continue;
        if (group_of_value[v] == static_cast<int>(gi) && space[v] != Space::Full) continue;
        bool reads = group_of_value[v] == static_cast<int>(gi);
        for (size_t m : G.members)
          for (uint32_t w : g.nodes[m].inputs) reads = reads || w == v;
        if (!reads || reaches(H, static_cast<int>(h), static_cast<int>(gi)) ||
            reaches(G, static_cast<int>(gi), static_cast<int>(h)))
          continue;
        absorb(static_cast<int>(gi), static_cast<int>(h));
        break;
      }
    }
  }

  void start(size_t i) {
    const Node& n = g.nodes[i];
    OpFamily f = op_family(n.op);
    Group G;
    if (fusible_reduction(n.op)) {
      G.domain = g.type(n.inputs[0]).shape;
    } else if (f == OpFamily::Pointwise || f == OpFamily::Cast) {
      G.domain = g.type(n.result).shape;
    } else {
      return;  // a view of an outside value stays a view
    }
    groups.push_back(std::move(G));
    join(i, static_cast<int>(groups.size() - 1), fusible_reduction(n.op) ? Space::Reduced : Space::Full);
  }

  void form() {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (!fusible(n)) continue;
      bool joined = false;
      for (uint32_t v : n.inputs) {
        int gi = group_of_value[v];
        if (gi < 0) continue;
        // After a reduction over leading axes, the reduced values are complete only at the end.
        if (groups[gi].has_reduction && !groups[gi].trailing && space[v] == Space::Reduced) continue;
        Space s = fit(n, gi);
        if (s == Space::Outside) continue;
        bool cycle = false;
        for (uint32_t w : n.inputs)
          if (group_of_value[w] != gi && depends_on(w, gi)) cycle = true;
        if (cycle) continue;
        join(i, gi, s);
        joined = true;
        for (uint32_t w : n.inputs) merge(gi, group_of_value[w]);
        break;
      }
      if (!joined) start(i);
    }
    merge_sibling_reductions();
    // A lone op stays a group for now where a larger group could compute it (softmax's
    // backward squares its [N, 1] sums before the [N, C] work that reads them): recomputed
    // there, it costs no launch of its own.
    for (Group& G : groups)
      if (G.compute < 2 && !(G.compute == 1 && small(G))) dissolve(G);
    recompute_small();
    for (size_t gi = 0; gi < groups.size(); ++gi)
      if (groups[gi].compute < 2 && !recomputed_anywhere(gi)) dissolve(groups[gi]);
  }

  void dissolve(Group& G) {
    for (size_t m : G.members) {
      group_of_node[m] = -1;
      group_of_value[g.nodes[m].result] = -1;
    }
    G.members.clear();
  }

  // Whether some group recomputes a node of group gi.
  bool recomputed_anywhere(size_t gi) const {
    for (const std::vector<size_t>& r : recomputed)
      for (size_t k : r)
        if (group_of_node[k] == static_cast<int>(gi)) return true;
    return false;
  }

  // ---- small groups recomputed where they are read --------------------------------------
  // On a GPU, a pointwise group over a small domain (batch norm's per-channel statistics,
  // [1, C, 1, 1]) that feeds groups over a larger one (the normalization, [N, C, H, W]) costs a
  // launch and a trip through memory for a few flops per element. A consumer that reads such
  // values at full size computes them itself: the small groups' nodes they need are cloned into
  // its body, where codegen computes every value at each index of the domain from operands
  // that broadcast to it. The small group stays only while something else reads it.
  static constexpr int64_t kSmallElements = int64_t{1} << 16;
  static constexpr size_t kSmallNodes = 32;

  // A pointwise group over a small domain, on a device that recomputes such groups.
  bool small(const Group& S) const {
    return opt.recompute_small && !S.members.empty() && !S.has_reduction && S.domain.product() <= kSmallElements &&
           opt.recompute_small(g.type(g.nodes[S.members.front()].result).device);
  }

  static bool broadcasts_into(const Dims& s, const Dims& domain) {
    if (s.size() > domain.size()) return false;
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t a = s[s.size() - 1 - k], b = domain[domain.size() - 1 - k];
      if (a != 1 && a != b) return false;
    }
    return true;
  }

  // The nodes of small groups (a quarter of `domain` or less) that value v needs, or false when
  // they are more than kSmallNodes; their operands from elsewhere go to `external`.
  bool small_slice(uint32_t v, const std::vector<char>& is_small, const Dims& domain, std::set<size_t>& nodes,
                   std::set<uint32_t>& external) const {
    std::vector<uint32_t> stack{v};
    while (!stack.empty()) {
      uint32_t u = stack.back();
      stack.pop_back();
      int p = producer[u];
      int gu = p >= 0 ? group_of_node[p] : -1;
      if (gu < 0 || !is_small[gu] || 4 * groups[gu].domain.product() > domain.product()) {
        external.insert(u);
        continue;
      }
      if (!nodes.insert(static_cast<size_t>(p)).second) continue;
      if (nodes.size() > kSmallNodes) return false;
      for (uint32_t w : g.nodes[p].inputs) stack.push_back(w);
    }
    return true;
  }

  // Makes group gi compute small group value v itself, where that is allowed (see above).
  bool recompute_into(int gi, uint32_t v, const std::vector<char>& is_small) {
    const Group& G = groups[gi];
    const Group& S = groups[group_of_value[v]];
    if (G.domain.product() < 4 * S.domain.product()) return false;
    if (g.type(v).device != g.type(g.nodes[G.members.front()].result).device) return false;
    std::set<size_t> nodes;
    std::set<uint32_t> external;
    if (!small_slice(v, is_small, G.domain, nodes, external) || nodes.empty()) return false;
    for (size_t k : nodes)
      if (!broadcasts_into(g.type(g.nodes[k].result).shape, G.domain)) return false;
    for (uint32_t w : external)
      if (group_of_value[w] == gi || depends_on(w, gi)) return false;
    std::vector<size_t>& r = recomputed[gi];
    r.insert(r.end(), nodes.begin(), nodes.end());
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    for (size_t k : nodes) recomputed_values[gi].insert(g.nodes[k].result);
    return true;
  }

  void recompute_small() {
    recomputed.assign(groups.size(), {});
    recomputed_values.assign(groups.size(), {});
    if (!opt.recompute_small) return;
    std::vector<char> is_small(groups.size(), 0);
    for (size_t gi = 0; gi < groups.size(); ++gi) is_small[gi] = small(groups[gi]);
    std::vector<std::vector<size_t>> users(g.types.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (uint32_t v : g.nodes[i].inputs) users[v].push_back(i);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      int gi = group_of_node[i];
      for (uint32_t v : n.inputs) {
        int s = group_of_value[v];
        if (s < 0 || !is_small[s] || s == gi) continue;
        if (gi >= 0) {  // a member reading it at full size
          if (space[n.result] == Space::Full) recompute_into(gi, v, is_small);
          continue;
        }
        // An expand of it whose readers are all full-size members of one group joins that group.
        if (n.kind != NodeKind::Op || n.op != OpId::Expand || users[n.result].empty()) continue;
        int target = group_of_node[users[n.result].front()];
        bool ok = target >= 0 && g.type(n.result).shape == groups[target].domain;
        for (size_t u : users[n.result])
          ok = ok && group_of_node[u] == target && space[g.nodes[u].result] == Space::Full;
        for (uint32_t o : g.outputs) ok = ok && o != n.result;
        if (!ok || !recompute_into(target, v, is_small)) continue;
        Group& T = groups[target];
        T.members.insert(std::upper_bound(T.members.begin(), T.members.end(), i), i);
        group_of_node[i] = target;
        group_of_value[n.result] = target;
        space[n.result] = Space::Full;
      }
    }
  }

  // The group as a Fused node; `used_outside` marks values needed after it.
  Node fused_node(const Group& G, const std::vector<char>& used_outside) const {
    Node f;
    f.kind = NodeKind::Fused;
    f.grad = false;
    auto body = std::make_shared<Graph>();
    body->name = g.name + ".fused";
    body->dim_names = g.dim_names;
    std::vector<uint32_t> inner(g.types.size(), kNoValue);
    auto operand = [&](uint32_t v) {
      if (inner[v] != kNoValue) return inner[v];
      if (scalar_constant(v)) {  // a number: copied in
        Node k = g.nodes[static_cast<size_t>(producer[v])];
        k.result = inner[v] = body->add_value(g.type(v));
        body->nodes.push_back(std::move(k));
        return inner[v];
      }
      inner[v] = body->add_value(g.type(v));
      body->inputs.push_back(inner[v]);
      f.inputs.push_back(v);
      return inner[v];
    };
    const int gi = group_of_node[G.members.front()];
    std::vector<size_t> nodes = recomputed[gi];
    nodes.insert(nodes.end(), G.members.begin(), G.members.end());
    for (size_t m : nodes) {
      Node k = g.nodes[m];
      for (uint32_t& v : k.inputs) v = operand(v);
      k.result = inner[g.nodes[m].result] = body->add_value(g.type(g.nodes[m].result));
      k.loc = {};
      if (f.loc.module.empty() && !f.loc.known()) f.loc = g.nodes[m].loc;
      body->nodes.push_back(std::move(k));
    }
    for (size_t m : G.members) {
      uint32_t v = g.nodes[m].result;
      if (!used_outside[v]) continue;
      body->outputs.push_back(inner[v]);
      f.results.push_back(v);
    }
    f.result = f.results.at(0);
    f.body = std::move(body);
    return f;
  }

  Graph build() const {
    // What each unit reads: a node its operands; a group also its recomputed nodes' operands,
    // less the values it computes itself.
    auto reads = [&](size_t i, const std::function<void(uint32_t)>& fn) {
      int gi = group_of_node[i];
      std::vector<size_t> nodes{i};
      if (gi >= 0 && groups[gi].members.front() == i) nodes.insert(nodes.end(), recomputed[gi].begin(), recomputed[gi].end());
      for (size_t k : nodes)
        for (uint32_t v : g.nodes[k].inputs)
          if (gi < 0 || !recomputed_values[gi].count(v)) fn(v);
    };
    // A group is dead when none of its values is read elsewhere (each reader recomputes them);
    // what only dead groups read is not read either.
    std::vector<char> used_outside, dead(groups.size(), 0);
    for (bool changed = true; changed;) {
      used_outside.assign(g.types.size(), 0);
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        int gi = group_of_node[i];
        if (gi >= 0 && dead[gi]) continue;
        reads(i, [&](uint32_t v) {
          if (group_of_value[v] >= 0 && group_of_value[v] != gi) used_outside[v] = 1;
        });
      }
      for (uint32_t v : g.outputs) used_outside[v] = 1;
      changed = false;
      for (size_t gi = 0; gi < groups.size(); ++gi) {
        bool any = false;
        for (size_t m : groups[gi].members) any = any || used_outside[g.nodes[m].result];
        if (!groups[gi].members.empty() && !any && !dead[gi]) dead[gi] = 1, changed = true;
      }
    }

    // Units in a new order: each op outside groups, and each group, after every unit it reads.
    // Kahn's algorithm over units, taking the unit whose first node comes first.
    size_t units = g.nodes.size();  // node i is unit i; group k is the unit of its first member
    std::vector<int> unit_of(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      int gi = group_of_node[i];
      unit_of[i] = gi >= 0 ? static_cast<int>(groups[gi].members.front()) : static_cast<int>(i);
    }
    std::vector<std::vector<int>> next(units);
    std::vector<int> waiting(units, 0);
    auto after = [&](int p, size_t i) {
      next[unit_of[p]].push_back(unit_of[i]);
      ++waiting[unit_of[i]];
    };
    int last_effect = -1;  // effects (collectives) keep their order: each waits for the last
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (group_of_node[i] >= 0 && dead[group_of_node[i]]) continue;
      reads(i, [&](uint32_t v) {
        int p = producer[v];
        if (p >= 0 && unit_of[p] != unit_of[i]) after(p, i);
      });
      if (g.nodes[i].kind == NodeKind::Op && op_def(g.nodes[i].op).effect) {
        if (last_effect >= 0) after(last_effect, i);
        last_effect = static_cast<int>(i);
      }
    }
    auto live_unit = [&](size_t u) {
      return unit_of[u] == static_cast<int>(u) && !(group_of_node[u] >= 0 && dead[group_of_node[u]]);
    };
    std::vector<int> ready;  // a min-heap by first node index keeps the original order
    for (size_t u = 0; u < units; ++u)
      if (live_unit(u) && waiting[u] == 0) ready.push_back(static_cast<int>(u));
    std::make_heap(ready.begin(), ready.end(), std::greater<>());
    Graph out = g;
    out.nodes.clear();
    while (!ready.empty()) {
      std::pop_heap(ready.begin(), ready.end(), std::greater<>());
      int u = ready.back();
      ready.pop_back();
      int gi = group_of_node[u];
      if (gi >= 0) out.nodes.push_back(fused_node(groups[gi], used_outside));
      else out.nodes.push_back(g.nodes[u]);
      for (int w : next[u])
        if (--waiting[w] == 0) {
          ready.push_back(w);
          std::push_heap(ready.begin(), ready.end(), std::greater<>());
        }
    }
    size_t expected = 0;
    for (size_t u = 0; u < units; ++u) expected += live_unit(u);
    KILN_CHECK(out.nodes.size() == expected, "fuse: @{}: internal error: groups form a cycle", g.name);
    return out;
  }
};

}  // namespace

GroupShape group_shape(const Graph& body) {
  GroupShape s;
  bool found = false;
  for (const Node& n : body.nodes) {
    if (n.kind != NodeKind::Op || !fusible_reduction(n.op)) continue;
    const Dims& in = body.type(n.inputs[0]).shape;
    Dims axes = reduce_axes(body, n);
    if (found && (in != s.domain || axes != s.reduce_axes))
      throw Error(fmt::format("fused group: reductions over {} of {} and {} of {} cannot share a kernel",
                              shape_str(s.reduce_axes), shape_str(s.domain), shape_str(axes), shape_str(in)));
    s.domain = in;
    s.reduce_axes = axes;
    found = true;
  }
  if (!found) {
    KILN_CHECK(!body.outputs.empty(), "fused group: no outputs");
    s.domain = body.type(body.outputs[0]).shape;
  }
  s.trailing = is_suffix(s.reduce_axes, s.domain.size());
  return s;
}

Graph fuse(const Graph& g) { return fuse(g, FuseOptions{}); }

Graph fuse(const Graph& g, const FuseOptions& options) {
  Fuser f(g, options);
  f.form();
  return f.build();
}

}  // namespace kiln::ir
