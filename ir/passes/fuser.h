// ir/passes/fuser.h -- fuse's state while it forms groups (fuse.cpp), shared with
// fuse_recompute.cpp: what the groups of a device that recomputes (FuseOptions::recompute_small)
// compute themselves instead of reading. Internal to the pass.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "ir/fusion.h"
#include "ir/graph.h"
#include "ir/passes.h"

namespace kiln::ir::fuse_detail {

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
  std::vector<int> group_of_node;   // -1: stays an op
  std::vector<int> group_of_value;  // -1: defined outside any group
  std::vector<Space> space;         // per value
  std::vector<Group> groups;
  std::vector<int> producer;  // value -> node index, -1 for inputs and params
  // Per group: the nodes of other groups it recomputes (sorted), and their results.
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

  bool fusible(const Node& n) const;

  // A one-element constant: fused_node copies it into the body.
  bool scalar_constant(uint32_t v) const;

  // Whether some value reachable backwards from `v` (through ops and other groups, not through
  // group `target` itself) belongs to group `target`: then `v` depends on it.
  bool depends_on(uint32_t v, int target) const;

  // The space node `n` would have in group `gi`, or Outside when it cannot join.
  Space fit(const Node& n, int gi) const;

  void join(size_t i, int gi, Space s);

  // Merges group h into group gi when they share a domain, at most one has a reduction, and
  // neither reaches the other through outside nodes (gelu: 0.5 * x and the tanh chain of x;
  // x * y feeding a sum that another operand's group started). The pointwise group's values
  // are full size; the merge must leave the reduced space's rules intact: reduced-space work
  // reads no full value, and full-size work reads reduced values only in keepdim form after
  // a trailing reduction.
  void merge(int gi, int h);

  // Whether group `from` reads, through nodes outside both groups, a value that depends on `to`.
  bool reaches(const Group& from, int from_id, int to) const;

  // Moves group h's members into group gi.
  void absorb(int gi, int h);

  // A lone reduction of a value that a group reducing over the same domain and axes reads too
  // joins that group: batch norm's backward reduces dy alone (the bias's gradient) and dy * x_hat
  // (the weight's) over the same axes, one pass over dy instead of two.
  void merge_sibling_reductions();

  void start(size_t i);

  void form();

  void dissolve(Group& G);

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
  bool small(const Group& S) const;

  static bool broadcasts_into(const Dims& s, const Dims& domain);

  // The nodes of small groups (a quarter of `domain` or less) that value v needs, or false when
  // they are more than kSmallNodes; their operands from elsewhere go to `external`.
  bool small_slice(uint32_t v, const std::vector<char>& is_small, const Dims& domain, std::set<size_t>& nodes,
                   std::set<uint32_t>& external) const;

  // Makes group gi compute small group value v itself, where that is allowed (see above).
  bool recompute_into(int gi, uint32_t v, const std::vector<char>& is_small);

  void recompute_small();

  // Group gi computes `nodes` (of other groups) itself.
  void take(int gi, const std::set<size_t>& nodes);
  // Per group, whether it is small(); per value, the nodes that read it.
  std::vector<char> small_groups() const;
  std::vector<std::vector<size_t>> readers() const;

  // ---- full-size values recomputed instead of written and read back ---------------------
  // On a GPU, a group that reads full-size values only it reads, which another group computes
  // pointwise from operands (layer_norm's backward: the weight's gradient sums over the rows,
  // the input's along them, and both need x - mean and dy * w), computes them itself from those
  // operands when that reads no more full-size tensors than it stops reading: the other group
  // then writes none of them.
  void recompute_shared();

  // The nodes of group s that value v needs, walking back inside s to operands from elsewhere
  // (into `external`); false when v needs one of s's reductions or their results, or more than
  // kSmallNodes nodes.
  bool pointwise_slice(uint32_t v, int s, std::set<size_t>& nodes, std::set<uint32_t>& external) const;

  // The group as a Fused node; `used_outside` marks values needed after it.
  Node fused_node(const Group& G, const std::vector<char>& used_outside) const;

  Graph build() const;
};

}  // namespace kiln::ir::fuse_detail
