// ir/passes/matmul_epilogue.cpp -- on CUDA, matmul(a, b) + bias, and relu or gelu_tanh of it,
// become one addmm node (runtime/ops/addmm.cpp), which cuBLASLt runs as one GEMM with a bias
// (and activation) epilogue instead of a GEMM and a kernel that reads its result again.
//
// The pattern: a matmul of two matrices whose result only an add reads, the add's other
// operand a bias of one value per column ([n], the matmul's dtype and device); then, when the
// add's result is read by a relu or gelu_tanh alone, that too. Anything else after the GEMM (an
// exact gelu, a residual add) stays for the next fused kernel. On the CPU nothing changes: its
// bias and activation already run in the fused kernel after the GEMM, and OpenBLAS has no
// epilogue to give them to. Not bit-preserving (the GEMM adds the bias before its one
// rounding), so it runs with fusion, as transpose-matmul does.
#include "ir/passes.h"

namespace kiln::ir {
namespace {

OpId fused_with(OpId act) {
  switch (act) {
    case OpId::Relu: return OpId::AddmmRelu;
    case OpId::GeluTanh: return OpId::AddmmGeluTanh;
    default: return OpId::Addmm;
  }
}

}  // namespace

Graph matmul_epilogue(const Graph& in) {
  std::vector<int> uses(in.types.size(), 0), def(in.types.size(), -1), reader(in.types.size(), -1);
  for (size_t i = 0; i < in.nodes.size(); ++i) {
    for (uint32_t v : in.nodes[i].inputs) {
      ++uses[v];
      reader[v] = static_cast<int>(i);
    }
    for (uint32_t v : defined_values(in.nodes[i])) def[v] = static_cast<int>(i);
  }
  for (uint32_t v : in.outputs) ++uses[v];
  auto op_node = [&](uint32_t v, OpId op) -> const Node* {
    int i = def[v];
    if (i < 0) return nullptr;
    const Node& n = in.nodes[static_cast<size_t>(i)];
    return n.kind == NodeKind::Op && n.op == op ? &n : nullptr;
  };
  Graph out = in;
  out.nodes.clear();
  std::vector<char> dropped(in.nodes.size(), 0);
  std::vector<Node> replacement(in.nodes.size());
  std::vector<char> replaced(in.nodes.size(), 0);
  for (size_t i = 0; i < in.nodes.size(); ++i) {
    const Node& add = in.nodes[i];
    if (add.kind != NodeKind::Op || add.op != OpId::Add || add.inputs.size() != 2 || add.attrs.imm_mask != 0) continue;
    for (int side = 0; side < 2; ++side) {
      uint32_t product = add.inputs[static_cast<size_t>(side)], bias = add.inputs[static_cast<size_t>(1 - side)];
      const Node* mm = op_node(product, OpId::Matmul);
      if (!mm || uses[product] != 1 || dropped[static_cast<size_t>(def[product])]) continue;
      const TensorType &t = in.type(product), &a = in.type(mm->inputs[0]), &b = in.type(mm->inputs[1]),
                       &bt = in.type(bias);
      if (!t.device.is_cuda() || !is_float(t.dtype) || a.shape.size() != 2 || b.shape.size() != 2) continue;
      if (bt.shape.size() != 1 || bt.shape[0] != t.shape[1] || bt.dtype != t.dtype || bt.device != t.device) continue;
      if (!(in.type(add.result) == t)) continue;
      Node fused;
      fused.op = OpId::Addmm;
      fused.inputs = {bias, mm->inputs[0], mm->inputs[1]};
      fused.result = add.result;
      fused.loc = add.loc;
      fused.grad = mm->grad;
      size_t at = i;  // where the node goes: the add's place, or its activation's
      int r = reader[add.result];
      if (uses[add.result] == 1 && r >= 0) {
        const Node& act = in.nodes[static_cast<size_t>(r)];
        if (act.kind == NodeKind::Op && fused_with(act.op) != OpId::Addmm && in.type(act.result) == t) {
          fused.op = fused_with(act.op);
          fused.result = act.result;
          fused.loc = act.loc;
          dropped[i] = 1;
          at = static_cast<size_t>(r);
        }
      }
      dropped[static_cast<size_t>(def[product])] = 1;
      replacement[at] = fused;
      replaced[at] = 1;
      break;
    }
  }
  for (size_t i = 0; i < in.nodes.size(); ++i) {
    if (replaced[i]) out.nodes.push_back(replacement[i]);
    else if (!dropped[i]) out.nodes.push_back(in.nodes[i]);
  }
  return out;
}

}  // namespace kiln::ir
