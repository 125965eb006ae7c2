// ir/passes/fold.cpp -- constant folding: an op whose tensor operands are all constants runs
// once, here, on the eager kernels, and becomes a constant (STYLE.md 2.2: folding = running .cpu),
// unless its value would be larger than its operands (a broadcast).
#include "ir/passes.h"
#include "runtime/autograd_meta.h"
#include "runtime/recorder.h"

namespace kiln::ir {
namespace {

// Larger results stay computed at run time, so a graph's constants stay small.
constexpr int64_t kMaxFoldedElements = 65536;

// The value of op node `n` when its operands are all in `known`, or an undefined Tensor.
Tensor evaluate(const Graph& g, const Node& n, const std::vector<Tensor>& known) {
  std::vector<Tensor> in;
  int64_t operand_elements = 1;
  for (uint32_t v : n.inputs) {
    if (!known.at(v).defined()) return {};
    in.push_back(known[v]);
    operand_elements += known[v].numel();
  }
  const TensorType& type = g.type(n.result);
  if (!type.device.is_cpu()) return {};  // constants are host data; device values stay computed
  for (int64_t d : type.shape)
    if (is_symbol(d)) return {};
  if (type.shape.product() > kMaxFoldedElements) return {};
  // A value larger than its operands (a broadcast: expand, a scalar added to a row) stays
  // computed: as a constant it would only repeat their data, and its size, which may be a
  // saved module's dynamic dim, would be frozen.
  if (type.shape.product() > operand_elements) return {};
  Tensor r;
  try {
    r = apply(n.op, in, n.attrs);
  } catch (const Error&) {
    return {};  // e.g. an index out of range: left for run time, which reports it
  }
  if (!(r.type() == type)) return {};
  // A view shares its operand's storage; a constant owns contiguous data.
  return op_def(n.op).view || !r.is_contiguous() ? r.clone() : r;
}

}  // namespace

Graph fold(const Graph& in) {
  RecorderGuard no_trace(nullptr);  // run the kernels even when a tracer is active
  GradModeGuard no_grad(false);
  Graph out = in;
  out.nodes.clear();
  std::vector<Tensor> known(in.types.size());  // value -> its data, when it is a constant
  for (const Node& n : in.nodes) {
    if (n.kind == NodeKind::Const) known[n.result] = n.constant;
    // A collective runs at run time; so does an op that takes no operands (iota), whose size
    // may be a dynamic dim's in a saved module: folded, it would be a constant of one size.
    if (n.kind == NodeKind::Op && !op_def(n.op).effect && op_arity(n.op) != 0) {
      if (Tensor c = evaluate(in, n, known); c.defined()) {
        known[n.result] = c;
        Node k;
        k.kind = NodeKind::Const;
        k.result = n.result;
        k.constant = std::move(c);
        k.loc = n.loc;
        out.nodes.push_back(std::move(k));
        continue;
      }
    }
    out.nodes.push_back(n);
  }
  return out;
}

}  // namespace kiln::ir
