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
// groups over larger ones is recomputed inside each of them (below), a lone op too, and a
// group recomputes full-size values of another that only it reads where that saves memory
// traffic. Groups become Fused nodes, one result per value used outside the group, placed so
// every value is defined before its uses.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "ir/fusion.h"
#include "ir/passes.h"
#include "ir/passes/fuser.h"
#include "runtime/check.h"
#include "runtime/type_rules.h"

namespace kiln::ir {

bool fusible_dtype(DType t) { return t != DType::F16 && t != DType::BF16; }

bool fusible_reduction(OpId op) { return op_def(op).combine != Combine::None; }

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

}  // namespace

namespace fuse_detail {

bool Fuser::fusible(const Node& n) const {
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

bool Fuser::scalar_constant(uint32_t v) const {
  int p = producer[v];
  return p >= 0 && g.nodes[static_cast<size_t>(p)].kind == NodeKind::Const &&
         g.nodes[static_cast<size_t>(p)].constant.numel() == 1;
}

bool Fuser::depends_on(uint32_t v, int target) const {
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

Space Fuser::fit(const Node& n, int gi) const {
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

void Fuser::join(size_t i, int gi, Space s) {
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

void Fuser::merge(int gi, int h) {
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

bool Fuser::reaches(const Group& from, int from_id, int to) const {
  for (size_t m : from.members)
    for (uint32_t w : g.nodes[m].inputs) {
      int gw = group_of_value[w];
      if (gw != from_id && gw != to && depends_on(w, to)) return true;
    }
  return false;
}

void Fuser::absorb(int gi, int h) {
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

void Fuser::merge_sibling_reductions() {
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

void Fuser::start(size_t i) {
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

void Fuser::form() {
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
  std::vector<char> taken(groups.size(), 0);  // some group recomputes a node of it
  for (const std::vector<size_t>& r : recomputed)
    for (size_t k : r) taken[static_cast<size_t>(group_of_node[k])] = 1;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    if (groups[gi].compute < 2 && !taken[gi]) dissolve(groups[gi]);
  recompute_shared();
}

void Fuser::dissolve(Group& G) {
  for (size_t m : G.members) {
    group_of_node[m] = -1;
    group_of_value[g.nodes[m].result] = -1;
  }
  G.members.clear();
}

Node Fuser::fused_node(const Group& G, const std::vector<char>& used_outside) const {
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
  std::vector<size_t> all = recomputed[gi], nodes;
  all.insert(all.end(), G.members.begin(), G.members.end());
  // Only what the group's results need (a value another group now recomputes is not).
  std::set<uint32_t> needed;
  for (size_t m : G.members)
    if (used_outside[g.nodes[m].result]) needed.insert(g.nodes[m].result);
  for (size_t k = all.size(); k-- > 0;) {
    const Node& n = g.nodes[all[k]];
    if (!needed.count(n.result)) continue;
    nodes.push_back(all[k]);
    needed.insert(n.inputs.begin(), n.inputs.end());
  }
  std::reverse(nodes.begin(), nodes.end());
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

Graph Fuser::build() const {
  // What each unit reads: a node its operands; a group also its recomputed nodes' operands,
  // less the values it computes itself.
  auto reads = [&](size_t i, const std::function<void(uint32_t)>& fn) {
    int gi = group_of_node[i];
    std::vector<size_t> nodes{i};
    if (gi >= 0 && groups[gi].members.front() == i)
      nodes.insert(nodes.end(), recomputed[gi].begin(), recomputed[gi].end());
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

}  // namespace fuse_detail

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

namespace {

// A 0-d value computed on the host (an optimizer's step size or bias correction) read by
// pointwise work on another device with kernels is uploaded once, by a to_device node before
// its first such reader, which reads the upload instead: that work then fuses. As a CPU
// operand it kept each op eager (the CPU-scalar rule makes it a number there): an Adam update
// was eight launches a parameter on CUDA, one fused.
Graph upload_host_scalars(const Graph& g, const FuseOptions& opt) {
  std::vector<int> producer(g.types.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (uint32_t v : defined_values(g.nodes[i])) producer[v] = static_cast<int>(i);
  auto host_scalar = [&](uint32_t v, Device device) {
    const TensorType& t = g.type(v);
    if (!t.device.is_cpu() || !t.shape.empty() || device.is_cpu() || (opt.has_kernels && !opt.has_kernels(device)))
      return false;
    const int p = producer[v];
    return p < 0 || g.nodes[static_cast<size_t>(p)].kind != NodeKind::Const;  // constants become numbers
  };
  Graph out = g;
  out.nodes.clear();
  std::map<std::pair<uint32_t, int16_t>, uint32_t> uploaded;  // (value, device index) -> its upload
  for (Node n : g.nodes) {
    const bool pointwise = n.kind == NodeKind::Op && op_family(n.op) == OpFamily::Pointwise;
    const Device device = pointwise ? g.type(n.result).device : cpu;
    for (uint32_t& v : n.inputs) {
      if (!pointwise || !host_scalar(v, device)) continue;
      auto [it, fresh] = uploaded.try_emplace({v, device.index}, kNoValue);
      if (fresh) {
        Node up;
        up.op = OpId::ToDevice;
        up.attrs.device = device;
        up.inputs = {v};
        up.result = it->second = out.add_value({g.type(v).dtype, {}, device});
        up.loc = n.loc;
        up.grad = n.grad;
        out.nodes.push_back(std::move(up));
      }
      v = it->second;
    }
    out.nodes.push_back(std::move(n));
  }
  return out;
}

}  // namespace

Graph fuse(const Graph& g) { return fuse(g, FuseOptions{}); }

Graph fuse(const Graph& g, const FuseOptions& options) {
  const Graph uploaded = upload_host_scalars(g, options);
  fuse_detail::Fuser f(uploaded, options);
  f.form();
  return f.build();
}

}  // namespace kiln::ir
