// jit/plan.cpp -- what an Executable runs, decided once from its graph: the kernels' loop
// layouts and thread splits (kernel_args), and the run plan: assigns, when each value is
// dropped and each output ready, which params kernels write in place, and the memory plan.
//
// Memory plan: values that only kernels write and that no output, assign or tape keeps are
// placed in one workspace by liveness (a buffer is reused once its last reader ran); each call
// takes a workspace from a small pool, so a cached call allocates only what it returns.
#include "jit/plan.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "ir/fusion.h"
#include "ir/group_analysis.h"
#include "runtime/check.h"
#include "runtime/loop_layout.h"

namespace kiln::jit {
namespace {

constexpr int64_t kParallelWork = 32768;  // elements per chunk worth a thread
// Splitting reductions: runs of about this many elements, for groups with fewer kept indices
// than kFewKept. Both fixed, so the cut (and the result's bits) depends on the shape alone.
constexpr int64_t kReduceRun = int64_t{1} << 15;
constexpr int64_t kFewKept = 64;
constexpr size_t kAlign = 64;

// Contiguous strides over the domain's dims that are not in `reduced` (0 on those).
Dims output_strides(const Dims& domain, uint64_t reduced) {
  Dims s(domain.size(), 0);
  int64_t acc = 1;
  for (size_t j = domain.size(); j-- > 0;) {
    if (reduced >> j & 1) continue;
    s[j] = acc;
    acc *= domain[j];
  }
  return s;
}

}  // namespace

std::vector<OpId> terminal_reductions(const ir::Graph& body) {
  ir::GroupAnalysis ga(body);
  for (const ir::Node& n : body.nodes)
    for (uint32_t v : n.inputs)
      if (ga.is_reduction(v)) return {};
  std::vector<OpId> ops;
  for (uint32_t v : body.outputs) {
    if (!ga.is_reduction(v)) return {};
    ops.push_back(body.nodes[static_cast<size_t>(ga.producer[v])].op);
  }
  return ops;
}

KernelArgs kernel_args(const ir::Node& n, std::span<const Dims> shapes, std::span<const Dims> operand_strides) {
  const ir::Graph& body = *n.body;
  KILN_CHECK(shapes.size() == body.inputs.size() && operand_strides.size() == shapes.size(),
             "fused group: {} operands given for {}", shapes.size(), body.inputs.size());
  ir::GroupShape gs = ir::group_shape(body);
  const Dims& S = gs.domain;
  for (int64_t d : S) KILN_CHECK(!is_symbol(d), "fused group: domain {} has a symbolic dim", shape_str(S));
  uint64_t red = 0;
  for (int64_t a : gs.reduce_axes) red |= uint64_t{1} << a;
  size_t n_in = shapes.size(), n_ops = n_in + body.outputs.size();
  std::vector<Dims> st;
  for (size_t k = 0; k < n_in; ++k) st.push_back(broadcast_strides(shapes[k], operand_strides[k], S, "fused group"));
  for (uint32_t o : body.outputs) st.push_back(body.type(o).shape == S ? output_strides(S, 0) : output_strides(S, red));

  // Dims merged where every operand steps through two as one, never a reduced with a kept one.
  Dims sizes = S;
  uint64_t reduced = red;
  merge_dims(sizes, st, &reduced);
  if (sizes.empty()) {  // all ones: one loop of one
    sizes.push_back(1);
    for (Dims& s : st) s.push_back(0);
  }
  KILN_CHECK(sizes.size() <= 16, "fused group: {} loop dims is more than a kernel takes", sizes.size());
  auto is_reduced = [&](int d) { return (reduced >> d & 1) != 0; };

  KernelArgs a;
  codegen::KernelLayout& L = a.layout;
  L.rank = static_cast<int>(sizes.size());
  a.sizes.assign(sizes.begin(), sizes.end());
  L.reduced = static_cast<uint32_t>(reduced);
  a.strides.assign(n_ops * L.rank, 0);
  for (size_t k = 0; k < n_ops; ++k) {
    codegen::OperandLayout o;
    o.dtype = body.type(k < n_in ? body.inputs[k] : body.outputs[k - n_in]).dtype;
    for (int d = 0; d < L.rank; ++d) {
      int64_t s = st[k][d];
      a.strides[k * L.rank + d] = s;
      if (s == 0) o.broadcast |= 1u << d;
    }
    o.unit_inner = st[k].back() == 1;
    (k < n_in ? L.inputs : L.outputs).push_back(o);
  }
  // Threads split the outermost dim that is kept (outputs there are disjoint).
  L.parallel_dim = -1;
  for (int d = 0; d < L.rank; ++d)
    if (!is_reduced(d)) {
      L.parallel_dim = d;
      break;
    }
  int64_t total = 1;
  for (int64_t size : sizes) total *= std::max<int64_t>(size, 1);
  a.range = L.parallel_dim >= 0 ? sizes[L.parallel_dim] : 0;
  int64_t per_index = a.range > 0 ? std::max<int64_t>(total / a.range, 1) : total;
  a.grain = std::max<int64_t>(1, kParallelWork / per_index);
  bool empty = sizes.product() == 0;
  if (a.range < kFewKept && L.reduced != 0 && !empty) {
    int d = 0;
    while (!is_reduced(d)) ++d;  // the outermost reduced dim
    int64_t run = std::max<int64_t>(1, kReduceRun / std::max<int64_t>(total / sizes[d], 1));
    std::vector<OpId> combine = terminal_reductions(body);
    if (!combine.empty() && sizes[d] > run) {
      a.split_dim = d;
      a.run = run;
      a.runs = (sizes[d] + run - 1) / run;
      a.combine = std::move(combine);
    }
  }
  return a;
}

std::vector<uint32_t> view_bases(const ir::Graph& g) {
  std::vector<uint32_t> base(g.types.size());
  for (uint32_t v = 0; v < base.size(); ++v) base[v] = v;
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Op && op_def(n.op).view) base[n.result] = base[n.inputs[0]];
  return base;
}

namespace {

void plan_memory(const ir::Graph& g, RunPlan& p) {
  p.offset.assign(g.types.size(), -1);
  bool taped = false;
  for (const ir::Node& n : g.nodes) taped = taped || (n.kind == ir::NodeKind::Op && n.grad);
  if (taped) return;  // a tape may keep any value alive past the call
  // Who may not be planned: values whose storage an output or assign keeps (views included).
  std::vector<uint32_t> base = view_bases(g);
  std::vector<char> pinned(g.types.size(), 0);
  std::vector<int64_t> last(g.types.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    for (uint32_t v : n.inputs) last[base[v]] = static_cast<int64_t>(i);
    if (n.kind == ir::NodeKind::Assign) pinned[base[n.inputs[1]]] = 1;
  }
  for (uint32_t v : g.outputs) pinned[base[v]] = 1;
  std::multimap<size_t, size_t> free_blocks;                        // size -> p.offset
  std::vector<std::pair<int64_t, std::pair<size_t, size_t>>> live;  // (last use, (size, p.offset))
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    // Blocks whose last reader ran before this node are free again.
    for (auto it = live.begin(); it != live.end();) {
      if (it->first < static_cast<int64_t>(i)) {
        free_blocks.emplace(it->second.first, it->second.second);
        it = live.erase(it);
      } else {
        ++it;
      }
    }
    const ir::Node& n = g.nodes[i];
    if (n.kind != ir::NodeKind::Fused) continue;
    for (uint32_t v : n.results) {
      const TensorType& t = g.type(v);
      if (pinned[v] || last[v] < 0 || !t.device.is_cpu()) continue;  // a device's own allocator
      size_t bytes = (static_cast<size_t>(t.shape.product()) * dtype_size(t.dtype) + kAlign - 1) / kAlign * kAlign;
      if (bytes == 0) continue;
      size_t off;
      if (auto it = free_blocks.lower_bound(bytes); it != free_blocks.end()) {
        off = it->second;
        bytes = it->first;
        free_blocks.erase(it);
      } else {
        off = p.workspace;
        p.workspace += bytes;
      }
      p.offset[v] = static_cast<int64_t>(off);
      live.push_back({last[v], {bytes, off}});
    }
  }
}

// Finds p.assigns whose value a fused group of pointwise ops computes with the param's own type,
// reading the param (if at all) element for element, where no later node reads the param or
// a view of it and no output is the param: the group can write into the param itself.
void plan_in_place(const ir::Graph& g, RunPlan& p) {
  p.in_place.assign(g.types.size(), -1);
  std::vector<uint32_t> base = view_bases(g);
  std::vector<int64_t> def(g.types.size(), -1), last_read(g.types.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    for (uint32_t v : ir::defined_values(n)) def[v] = static_cast<int64_t>(i);
    if (n.kind != ir::NodeKind::Assign)
      for (uint32_t v : n.inputs) last_read[base[v]] = static_cast<int64_t>(i);
  }
  std::vector<char> output(g.types.size(), 0);
  for (uint32_t v : g.outputs) output[base[v]] = 1;
  for (auto [param, v] : p.assigns) {
    uint32_t pv = g.params[param];
    if (def[v] < 0 || output[pv] || !(g.type(v) == g.type(pv))) continue;
    const ir::Node& f = g.nodes[static_cast<size_t>(def[v])];
    if (f.kind != ir::NodeKind::Fused || last_read[pv] > def[v]) continue;
    bool ok = true;
    for (const ir::Node& b : f.body->nodes) {
      OpFamily fam = b.kind == ir::NodeKind::Op ? op_family(b.op) : OpFamily::Other;
      ok = ok && (b.kind == ir::NodeKind::Const || fam == OpFamily::Pointwise || fam == OpFamily::Cast);
    }
    for (uint32_t r : f.results) ok = ok && g.type(r).shape == g.type(pv).shape;
    for (uint32_t in : f.inputs) ok = ok && (base[in] != pv || in == pv);  // no view of it
    if (ok) p.in_place[v] = static_cast<int>(param);
  }
}

}  // namespace

RunPlan plan_run(const ir::Graph& g, bool kernels) {
  RunPlan p;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    switch (n.kind) {
      case ir::NodeKind::Fused: ++p.kernels; break;
      case ir::NodeKind::Assign: {
        size_t k = 0;
        while (k < g.params.size() && g.params[k] != n.inputs[0]) ++k;
        KILN_CHECK(k < g.params.size(), "jit: @{}: assign to a value that is no param", g.name);
        p.assigns.emplace_back(k, n.inputs[1]);
        break;
      }
      case ir::NodeKind::Const: p.consts.push_back(&n); break;
      case ir::NodeKind::Op: ++p.ops; break;
    }
  }
  std::unordered_set<uint32_t> bound(g.inputs.begin(), g.inputs.end());
  bound.insert(g.params.begin(), g.params.end());
  for (uint32_t v : g.outputs) p.bound_output.push_back(bound.count(v) ? 1 : 0);
  std::vector<int64_t> last(g.types.size(), -1);
  std::vector<char> kept(g.types.size(), 0);
  for (uint32_t v : g.outputs) kept[v] = 1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind == ir::NodeKind::Assign) kept[n.inputs[1]] = 1;
    for (uint32_t v : n.inputs) last[v] = static_cast<int64_t>(i);
    for (uint32_t v : ir::defined_values(n))
      if (last[v] < 0) last[v] = static_cast<int64_t>(i);  // read by nothing: dropped at once
  }
  {
    std::vector<uint32_t> base = view_bases(g);
    std::vector<int64_t> made_at(g.types.size(), -1);  // computing node, for non-constants
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::Node& n = g.nodes[i];
      if (n.kind == ir::NodeKind::Op || n.kind == ir::NodeKind::Fused)
        for (uint32_t v : ir::defined_values(n)) made_at[v] = static_cast<int64_t>(i);
    }
    p.ready_after.resize(g.nodes.size());
    p.ready_at_end.assign(g.outputs.size(), 0);
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      uint32_t v = g.outputs[o];
      // An input, a param or a constant, or a view of one: no node makes its storage.
      if (made_at[base[v]] < 0) p.ready_at_end[o] = 1;
      else p.ready_after[static_cast<size_t>(made_at[v])].push_back(o);
    }
  }
  p.drop_after.resize(g.nodes.size());
  for (uint32_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0 && !kept[v]) p.drop_after[static_cast<size_t>(last[v])].push_back(v);
  p.in_place.assign(g.types.size(), -1);
  p.offset.assign(g.types.size(), -1);
  if (!kernels) return p;  // no kernel writes a workspace or a param in place
  plan_memory(g, p);
  plan_in_place(g, p);
  return p;
}

}  // namespace kiln::jit
