// ir/passes/canonicalize.cpp -- one spelling per attribute, and rewrites that drop work without
// changing a single bit of any result (IEEE, no fast-math).
//
// A node is only ever replaced by a value of exactly its type: x + 0 where the zero broadcasts x
// to a larger shape stays. Float x + 0.0 stays too (-0.0 + 0.0 is +0.0); x + -0.0 goes.
#include <cmath>

#include "ir/passes.h"
#include "runtime/type_rules.h"

namespace kiln::ir {
namespace {

class Canonicalizer {
 public:
  explicit Canonicalizer(const Graph& in) : in_(in), out_(in), same_(in.types.size()) {
    out_.nodes.clear();
    for (uint32_t v = 0; v < same_.size(); ++v) same_[v] = v;
    def_.assign(in.types.size(), -1);
  }

  Graph run() {
    for (const Node& n0 : in_.nodes) {
      Node n = n0;
      for (uint32_t& v : n.inputs) v = same_[v];
      if (n.kind == NodeKind::Op) {
        normalize(n);
        if (uint32_t v = simplify(n); v != kNoValue) {
          same_[n.result] = v;
          continue;
        }
      }
      if (n.result != kNoValue) def_[n.result] = static_cast<int64_t>(out_.nodes.size());
      out_.nodes.push_back(std::move(n));
    }
    for (uint32_t& v : out_.outputs) v = same_[v];
    return std::move(out_);
  }

 private:
  // The node that defines `v`, or null for arguments and parameters.
  const Node* producer(uint32_t v) const { return v < def_.size() && def_[v] >= 0 ? &out_.nodes[def_[v]] : nullptr; }
  // The node that defines `v` by applying `op`, or null.
  const Node* op_producer(uint32_t v, OpId op) const {
    const Node* d = producer(v);
    return d && d->kind == NodeKind::Op && d->op == op ? d : nullptr;
  }

  // Reductions: sorted, de-duplicated, non-negative axes; all of them spelled []. argmax and
  // argmin read [] as "the flattened tensor", so theirs are only made non-negative.
  void normalize(Node& n) const {
    if (op_family(n.op) != OpFamily::Reduce) return;
    int64_t rank = static_cast<int64_t>(out_.type(n.inputs.at(0)).shape.size());
    if (n.op == OpId::Argmax || n.op == OpId::Argmin) {
      for (int64_t& a : n.attrs.axes) a = wrap_dim(a, rank, op_name(n.op));
      return;
    }
    Dims axes = normalize_axes(n.attrs.axes, rank, op_name(n.op));
    n.attrs.axes = static_cast<int64_t>(axes.size()) == rank ? Dims{} : axes;
  }

  // Whether pointwise operand k is the number `want` (an immediate, or a constant all of whose
  // elements are `want`). Float zeros must match in sign too.
  bool operand_is(const Node& n, int k, double want) const {
    bool signed_zero = want == 0 && is_float(n.attrs.dtype);
    auto same = [&](double v) { return v == want && (!signed_zero || std::signbit(v) == std::signbit(want)); };
    if (n.attrs.imm_mask >> k & 1) return same(n.attrs.imm[k].to_double());
    const Node* c = producer(tensor_operand(n, k));
    if (!c || c->kind != NodeKind::Const) return false;
    for (double x : c->constant.to_vector<double>())
      if (!same(x)) return false;
    return true;
  }

  // The value of pointwise operand k, or kNoValue when it is an immediate.
  static uint32_t tensor_operand(const Node& n, int k) {
    int t = input_of_slot(n.attrs.imm_mask, k);
    return t < 0 ? kNoValue : n.inputs.at(static_cast<size_t>(t));
  }

  // Operand `keep` when operand `unit` is the op's identity `want` and `keep` alone already has
  // the node's type (the identity does not broadcast it).
  uint32_t keep_if_unit(const Node& n, int unit, double want, int keep) const {
    uint32_t v = tensor_operand(n, keep);
    if (v == kNoValue || !(out_.type(v) == out_.type(n.result))) return kNoValue;
    return operand_is(n, unit, want) ? v : kNoValue;
  }

  static bool idempotent(OpId op) {
    switch (op) {
      case OpId::Abs:
      case OpId::Sign:
      case OpId::Relu:
      case OpId::Floor:
      case OpId::Ceil:
      case OpId::Round: return true;
      default: return false;
    }
  }

  // The value that `n` can be replaced by, or kNoValue; may first rewrite `n` itself (a
  // movement of a movement becomes one movement).
  uint32_t simplify(Node& n) const {
    uint32_t x = n.inputs.empty() ? kNoValue : n.inputs[0];
    uint32_t v = kNoValue;
    switch (n.op) {
      case OpId::Add: {
        double zero = is_float(n.attrs.dtype) ? -0.0 : 0.0;
        v = keep_if_unit(n, 1, zero, 0);
        if (v == kNoValue) v = keep_if_unit(n, 0, zero, 1);
        return v;
      }
      case OpId::Sub: return keep_if_unit(n, 1, 0.0, 0);
      case OpId::Mul: v = keep_if_unit(n, 1, 1.0, 0); return v != kNoValue ? v : keep_if_unit(n, 0, 1.0, 1);
      case OpId::Div: return keep_if_unit(n, 1, 1.0, 0);
      case OpId::Neg:
      case OpId::LogicalNot:
        if (n.attrs.imm_mask) return kNoValue;
        if (const Node* inner = op_producer(x, n.op); inner && !inner->attrs.imm_mask)
          v = inner->inputs.at(0);  // logical_not twice is x only for bool x: the type says
        break;
      case OpId::Cast: v = x; break;
      case OpId::Reshape:
      case OpId::Expand:
        if (const Node* inner = op_producer(x, n.op)) n.inputs[0] = x = inner->inputs.at(0);
        v = x;  // to its own shape
        break;
      case OpId::Permute: {
        if (const Node* inner = op_producer(x, OpId::Permute)) {
          Dims order;  // out dim j reads inner dim axes[j], which reads x dim inner[axes[j]]
          const Dims& first = inner->attrs.axes;
          for (int64_t d : n.attrs.axes) {
            if (d < 0 || d >= static_cast<int64_t>(first.size())) return kNoValue;  // invalid
            order.push_back(first[d]);
          }
          n.attrs.axes = order;
          n.inputs[0] = x = inner->inputs.at(0);
        }
        for (size_t j = 0; j < n.attrs.axes.size(); ++j)
          if (n.attrs.axes[j] != static_cast<int64_t>(j)) return kNoValue;
        v = x;  // the identity order
        break;
      }
      case OpId::Slice: v = x; break;  // the whole dim: only then is the shape unchanged
      case OpId::ToDevice:
        // Positions made on the host and moved are made where they go: no copy, and no host
        // work inside a device's replayed graph.
        if (const Node* inner = op_producer(x, OpId::Iota)) {
          n.op = OpId::Iota;
          n.inputs.clear();
          n.attrs.shape = inner->attrs.shape;
        }
        return kNoValue;
      default:
        if (!idempotent(n.op) || n.attrs.imm_mask) return kNoValue;
        if (const Node* inner = op_producer(x, n.op); inner && !inner->attrs.imm_mask) return x;
        if (n.op == OpId::Floor || n.op == OpId::Ceil || n.op == OpId::Round)
          if (!is_float(out_.type(x).dtype)) v = x;  // integers round to themselves
        break;
    }
    return v != kNoValue && out_.type(v) == out_.type(n.result) ? v : kNoValue;
  }

  const Graph& in_;
  Graph out_;
  std::vector<uint32_t> same_;  // value -> the value that replaces it
  std::vector<int64_t> def_;    // value -> index of its defining node in out_.nodes, or -1
};

}  // namespace

Graph canonicalize(const Graph& in) { return Canonicalizer(in).run(); }

}  // namespace kiln::ir
