// cuda/stages.cpp -- a fused group's reductions as a CUDA launch sees them: which outputs
// combine partial results, and the group cut at its reduction levels (cuda/stages.h), read
// from ir/group_analysis.h.
#include "cuda/stages.h"

#include <algorithm>
#include <map>
#include <memory>

#include "ir/fusion.h"
#include "ir/group_analysis.h"

namespace kiln::cuda::stages {
namespace {

// A body computing `outputs` of `body` from the values of `from` it needs (each with the type
// given there), cloning the nodes between; `used` gets the indices into `from` it reads.
ir::Graph sub_body(const ir::Graph& body, const std::vector<std::pair<uint32_t, TensorType>>& from,
                   const std::vector<std::pair<uint32_t, TensorType>>& outputs, std::vector<size_t>& used) {
  std::map<uint32_t, size_t> given;
  for (size_t k = 0; k < from.size(); ++k) given[from[k].first] = k;
  std::vector<char> need(body.types.size(), 0);
  for (const auto& [v, t] : outputs) need[v] = 1;
  for (size_t i = body.nodes.size(); i-- > 0;) {
    const ir::Node& n = body.nodes[i];
    if (!need[n.result] || given.count(n.result)) continue;
    for (uint32_t u : n.inputs) need[u] = 1;
  }
  std::map<uint32_t, uint32_t> made;  // value of body -> value of the stage
  ir::Graph g;
  for (size_t k = 0; k < from.size(); ++k) {
    if (!need[from[k].first]) continue;
    made[from[k].first] = g.add_value(from[k].second);
    g.inputs.push_back(made[from[k].first]);
    used.push_back(k);
  }
  for (const ir::Node& n : body.nodes) {
    if (!need[n.result] || made.count(n.result)) continue;
    ir::Node c = n;
    for (uint32_t& u : c.inputs) u = made.at(u);
    c.result = g.add_value(body.type(n.result));
    made[n.result] = c.result;
    g.nodes.push_back(std::move(c));
  }
  for (const auto& [v, t] : outputs) {
    uint32_t s = made.at(v);
    g.types[s] = t;  // the same elements, in the shape the stage's domain needs
    g.outputs.push_back(s);
  }
  return g;
}

ir::Node fused_node(ir::Graph g) {
  ir::Node n;
  n.kind = ir::NodeKind::Fused;
  n.results = g.outputs;
  n.body = std::make_shared<const ir::Graph>(std::move(g));
  return n;
}

}  // namespace

std::vector<std::optional<OpId>> cut_outputs(const ir::Graph& body) {
  ir::GroupAnalysis lv(body);
  for (const ir::Node& n : body.nodes)
    for (uint32_t u : n.inputs)
      if (lv.level[u] > 0) return {};
  const Dims domain = ir::group_shape(body).domain;
  std::vector<std::optional<OpId>> out;
  for (uint32_t o : body.outputs) {
    const TensorType& t = body.type(o);
    if (lv.is_reduction(o)) {
      if (t.dtype == DType::F16 || t.dtype == DType::BF16) return {};
      out.emplace_back(body.nodes[static_cast<size_t>(lv.producer[o])].op);
    } else if (t.shape == domain) {
      out.emplace_back(std::nullopt);
    } else {
      return {};
    }
  }
  return out;
}

Stages by_level(const ir::Graph& body) {
  ir::GroupAnalysis lv(body);
  ir::GroupShape gs = ir::group_shape(body);
  const int top = lv.max_level;
  Stages s;
  if (top == 0) return s;
  for (size_t a = 0; a < body.outputs.size(); ++a)
    for (size_t b = a + 1; b < body.outputs.size(); ++b)
      if (body.outputs[a] == body.outputs[b]) return s;
  // Reductions as the stages after theirs read them: shaped as the domain with its reduced
  // dims of size 1 (their elements lie in that order), so they broadcast to it.
  Dims kept = gs.domain;
  for (int64_t a : gs.reduce_axes) kept[static_cast<size_t>(a)] = 1;
  auto as_kept = [&](uint32_t v) { return TensorType{body.type(v).dtype, kept, body.type(v).device}; };
  std::map<uint32_t, Place> place;
  std::vector<std::pair<uint32_t, TensorType>> inputs;  // what a stage may read
  for (size_t k = 0; k < body.inputs.size(); ++k) {
    place[body.inputs[k]] = {Place::Input, k};
    inputs.emplace_back(body.inputs[k], body.type(body.inputs[k]));
  }
  std::map<uint32_t, size_t> output_of;
  for (size_t o = 0; o < body.outputs.size(); ++o) output_of[body.outputs[o]] = o;
  auto is_full = [&](uint32_t v) { return body.type(v).shape == gs.domain; };

  auto add_stage = [&](const std::vector<std::pair<uint32_t, TensorType>>& outs) {
    Stage st;
    std::vector<size_t> used;
    ir::Graph g = sub_body(body, inputs, outs, used);
    for (size_t k : used) st.reads.push_back(place.at(inputs[k].first));
    for (const auto& [v, t] : outs) st.writes.push_back(place.at(v));
    st.group = fused_node(std::move(g));
    s.stages.push_back(std::move(st));
  };
  for (int k = 1; k <= top + 1; ++k) {
    std::vector<std::pair<uint32_t, TensorType>> outs;
    for (const ir::Node& n : body.nodes)
      if (lv.is_reduction(n.result) && lv.level[n.result] == k) {
        auto o = output_of.find(n.result);
        if (o != output_of.end()) {
          place[n.result] = {Place::Output, o->second};
        } else {
          place[n.result] = {Place::Temp, s.temps.size()};
          s.temps.push_back(as_kept(n.result));
        }
        outs.emplace_back(n.result, body.type(n.result));
      }
    for (size_t o = 0; o < body.outputs.size(); ++o) {
      uint32_t v = body.outputs[o];
      if (is_full(v) && lv.level[v] == k - 1) {
        place[v] = {Place::Output, o};
        outs.emplace_back(v, body.type(v));
      }
    }
    if (!outs.empty()) add_stage(outs);
    for (const auto& [v, t] : outs)
      if (!is_full(v)) inputs.emplace_back(v, as_kept(v));
  }
  // The reduced-shape outputs that are not reductions, over the reduced shape.
  std::vector<std::pair<uint32_t, TensorType>> small;
  for (size_t o = 0; o < body.outputs.size(); ++o) {
    uint32_t v = body.outputs[o];
    if (!place.count(v)) {
      place[v] = {Place::Output, o};
      small.emplace_back(v, as_kept(v));
    }
  }
  if (!small.empty()) add_stage(small);
  return s;
}

}  // namespace kiln::cuda::stages
