// ir/passes/fold.cpp -- constant folding: an op whose tensor operands are all constants runs
// once, here, on the eager kernels, and becomes a constant (STYLE.md 2.2: folding = running .cpu).
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
  for (uint32_t v : n.inputs) {
    if (!known.at(v).defined()) return {};
    in.push_back(known[v]);
  }
  const TensorType& type = g.type(n.result);
  if (!type.device.is_cpu()) return {};  // constants are host data; device values stay computed
  for (int64_t d : type.shape)
    if (is_symbol(d)) return {};
  if (type.shape.product() > kMaxFoldedElements) return {};
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
    if (n.kind == NodeKind::Op && !op_def(n.op).effect) {  // a collective runs at run time
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
