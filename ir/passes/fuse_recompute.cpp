// ir/passes/fuse_recompute.cpp -- on a device whose groups recompute
// (FuseOptions::recompute_small: a GPU), what a group computes itself instead of reading from
// memory: a small group's values (per-row or per-channel statistics), a lone small op, and
// full-size pointwise values of another group that only it reads (ir/passes/fuser.h).
#include <algorithm>
#include <set>

#include "ir/fusion.h"
#include "ir/passes/fuser.h"

namespace kiln::ir::fuse_detail {

bool Fuser::small(const Group& S) const {
  return opt.recompute_small && !S.members.empty() && !S.has_reduction && S.domain.product() <= kSmallElements &&
         opt.recompute_small(g.type(g.nodes[S.members.front()].result).device);
}

namespace {

// What recomputing one op costs a GPU per element, in instructions (roughly): a few for the ops
// that are an instruction or two; about 32 for a division, a square root or a transcendental
// (their IEEE forms, with slow paths).
int64_t recompute_cost(const Node& n) {
  if (n.kind != NodeKind::Op || op_family(n.op) != OpFamily::Pointwise) return 1;
  switch (n.op) {
    case OpId::Neg:
    case OpId::Abs:
    case OpId::Sign:
    case OpId::Relu:
    case OpId::Floor:
    case OpId::Ceil:
    case OpId::Round:
    case OpId::LogicalNot:
    case OpId::Add:
    case OpId::Sub:
    case OpId::Mul:
    case OpId::Maximum:
    case OpId::Minimum:
    case OpId::Eq:
    case OpId::Ne:
    case OpId::Lt:
    case OpId::Le:
    case OpId::Gt:
    case OpId::Ge:
    case OpId::LogicalAnd:
    case OpId::LogicalOr:
    case OpId::ReluGrad:
    case OpId::Where:
    case OpId::Clamp: return 2;
    default: return 32;
  }
}

// Recomputed values cost their ops at every element of the reader's domain; past this many
// instructions in all (about 4 us of an H100's or H200's issue slots) a launch of their own is
// cheaper. Batch norm's per-channel scale (rsqrt, divisions) over a [64, 256, 56, 56] domain
// is 3,000 times over; softmax's per-row values over [64, 1000] fit.
constexpr int64_t kRecomputeBudget = int64_t{1} << 27;

}  // namespace

bool Fuser::broadcasts_into(const Dims& s, const Dims& domain) {
  if (s.size() > domain.size()) return false;
  for (size_t k = 0; k < s.size(); ++k) {
    int64_t a = s[s.size() - 1 - k], b = domain[domain.size() - 1 - k];
    if (a != 1 && a != b) return false;
  }
  return true;
}

bool Fuser::small_slice(uint32_t v, const std::vector<char>& is_small, const Dims& domain, std::set<size_t>& nodes,
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

bool Fuser::recompute_into(int gi, uint32_t v, const std::vector<char>& is_small) {
  const Group& G = groups[gi];
  const Group& S = groups[group_of_value[v]];
  if (G.domain.product() < 4 * S.domain.product()) return false;
  if (g.type(v).device != g.type(g.nodes[G.members.front()].result).device) return false;
  std::set<size_t> nodes;
  std::set<uint32_t> external;
  if (!small_slice(v, is_small, G.domain, nodes, external) || nodes.empty()) return false;
  int64_t per_element = 0;
  for (size_t k : nodes) {
    if (!broadcasts_into(g.type(g.nodes[k].result).shape, G.domain)) return false;
    per_element += recompute_cost(g.nodes[k]);
  }
  if (per_element * G.domain.product() > kRecomputeBudget) return false;
  for (uint32_t w : external)
    if (group_of_value[w] == gi || depends_on(w, gi)) return false;
  take(gi, nodes);
  return true;
}

void Fuser::take(int gi, const std::set<size_t>& nodes) {
  std::vector<size_t>& r = recomputed[gi];
  r.insert(r.end(), nodes.begin(), nodes.end());
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  for (size_t k : nodes) recomputed_values[gi].insert(g.nodes[k].result);
}

std::vector<char> Fuser::small_groups() const {
  std::vector<char> is_small(groups.size(), 0);
  for (size_t gi = 0; gi < groups.size(); ++gi) is_small[gi] = small(groups[gi]);
  return is_small;
}

std::vector<std::vector<size_t>> Fuser::readers() const {
  std::vector<std::vector<size_t>> users(g.types.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (uint32_t v : g.nodes[i].inputs) users[v].push_back(i);
  return users;
}

void Fuser::recompute_small() {
  recomputed.assign(groups.size(), {});
  recomputed_values.assign(groups.size(), {});
  if (!opt.recompute_small) return;
  const std::vector<char> is_small = small_groups();
  const std::vector<std::vector<size_t>> users = readers();
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
      for (size_t u : users[n.result]) ok = ok && group_of_node[u] == target && space[g.nodes[u].result] == Space::Full;
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

void Fuser::recompute_shared() {
  if (!opt.recompute_small) return;
  const std::vector<char> is_small = small_groups();
  std::vector<std::vector<size_t>> users = readers();
  for (uint32_t o : g.outputs) users[o].push_back(g.nodes.size());  // read after the graph
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Group& G = groups[gi];
    if (G.members.empty() || is_small[gi] || !opt.recompute_small(g.type(g.nodes[G.members.front()].result).device))
      continue;
    std::set<uint32_t> wanted, reads;
    for (size_t m : G.members)
      for (uint32_t v : g.nodes[m].inputs) {
        reads.insert(v);
        int s = group_of_value[v];
        if (s < 0 || s == static_cast<int>(gi) || is_small[s] || g.type(v).shape != G.domain) continue;
        bool only_here = true;  // besides its own group's members
        for (size_t u : users[v])
          only_here =
              only_here && u < g.nodes.size() && (group_of_node[u] == static_cast<int>(gi) || group_of_node[u] == s);
        if (only_here) wanted.insert(v);
      }
    if (wanted.empty()) continue;
    std::set<size_t> nodes;
    std::set<uint32_t> external;
    bool ok = true;
    for (uint32_t v : wanted) ok = ok && pointwise_slice(v, group_of_value[v], nodes, external);
    if (!ok) continue;
    size_t new_full_reads = 0;
    std::vector<uint32_t> small_values;  // a small group's: recomputed here too, or read
    for (uint32_t w : external) {
      ok = ok && group_of_value[w] != static_cast<int>(gi) && !depends_on(w, static_cast<int>(gi));
      if (group_of_value[w] >= 0 && is_small[group_of_value[w]] && !reads.count(w)) small_values.push_back(w);
      new_full_reads += 4 * g.type(w).shape.product() > G.domain.product() && !reads.count(w);
    }
    for (size_t k : nodes) ok = ok && broadcasts_into(g.type(g.nodes[k].result).shape, G.domain);
    if (!ok || new_full_reads > wanted.size()) continue;
    // A small value this group cannot recompute cheaply (recompute_into prices it) is read
    // from its own small kernel: it depends on nothing of this group (checked above).
    for (uint32_t w : small_values) recompute_into(static_cast<int>(gi), w, is_small);
    take(static_cast<int>(gi), nodes);
  }
}

bool Fuser::pointwise_slice(uint32_t v, int s, std::set<size_t>& nodes, std::set<uint32_t>& external) const {
  std::vector<uint32_t> stack{v};
  while (!stack.empty()) {
    uint32_t u = stack.back();
    stack.pop_back();
    int p = producer[u];
    if (p < 0 || group_of_node[p] != s) {
      external.insert(u);
      continue;
    }
    if (space[u] != Space::Full || fusible_reduction(g.nodes[p].op)) return false;
    if (!nodes.insert(static_cast<size_t>(p)).second) continue;
    if (nodes.size() > kSmallNodes) return false;
    for (uint32_t w : g.nodes[p].inputs) stack.push_back(w);
  }
  return true;
}

}  // namespace kiln::ir::fuse_detail
