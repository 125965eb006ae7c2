// codegen/cuda/emit_value.cpp -- a fused group's values at one loop index, as CUDA C (the
// emission's state is in emit_kernel.h): where each operand's element lies, its load and store
// (f16 and bf16 held in a float), pointwise immediates, and each node's value from its inputs.
#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "codegen/cuda/emit_kernel.h"
#include "ir/fusion.h"
#include "ir/graph.h"
#include "runtime/check.h"

namespace kiln::codegen::cuda_emit {

bool KernelEmitter::is_reduction(uint32_t v) const {
  int p = producer[v];
  return p >= 0 && body.nodes[p].kind == ir::NodeKind::Op && ir::fusible_reduction(body.nodes[p].op);
}
const OperandLayout& KernelEmitter::operand(size_t k) const { return k < n_in ? L.inputs[k] : L.outputs[k - n_in]; }
DType KernelEmitter::operand_dtype(size_t k) const {
  return body.type(k < n_in ? body.inputs[k] : body.outputs[k - n_in]).dtype;
}
bool KernelEmitter::full_output(size_t o) const { return operand(n_in + o).broadcast == 0 || L.reduced == 0; }

// Operand k's element at loop index idx: "((T*)a.data[k])[offset]".
std::string KernelEmitter::element(size_t k, const std::vector<std::string>& idx) {
  const OperandLayout& o = operand(k);
  std::string off;
  for (int d = 0; d < L.rank; ++d) {
    if (o.broadcast >> d & 1 || idx[d] == "0") continue;
    bool unit = d == L.rank - 1 && o.unit_inner;
    std::string term = unit ? idx[d] : fmt::format("{} * a.stride[{}]", idx[d], k * L.rank + d);
    off += (off.empty() ? "" : " + ") + term;
  }
  if (partials && k >= n_in && !full_output(k - n_in)) off += (off.empty() ? "" : " + ") + std::string("part * rows");
  return fmt::format("(({}*)a.data[{}])[{}]", mem_name(operand_dtype(k)), k, off.empty() ? "0" : off);
}
Val KernelEmitter::load(size_t k, const std::vector<std::string>& idx) {
  DType dt = operand_dtype(k);
  std::string el = element(k, idx);
  if (dt == DType::F16) return e.def(CT::F32, fmt::format("kiln_h2f({})", el));
  if (dt == DType::BF16) return e.def(CT::F32, fmt::format("kiln_bf2f({})", el));
  return e.def(ct_of(dt), el);
}
void KernelEmitter::store(size_t out, const Val& v, const std::vector<std::string>& idx) {
  DType dt = body.type(body.outputs[out]).dtype;
  std::string el = element(n_in + out, idx);
  if (is_half(dt)) {  // the float holds a value of dt already: its bits, exactly
    std::string f = v.number ? literal(v.c, CT::F32) : v.x;
    e.line(fmt::format("{} = {}({});", el, dt == DType::F16 ? "kiln_f2h" : "kiln_f2bf", f));
    return;
  }
  e.line(fmt::format("{} = {};", el, v.as(ct_of(dt))));
}

Val KernelEmitter::immediate(size_t node, int slot, DType cd) {
  const ir::Node& n = body.nodes[node];
  if (!options.immediates_as_args) return Val(&e, literal(n.attrs.imm[slot], cd), ct_of(cd));
  int k = imm_index.at({node, slot});
  if (is_float(cd)) return e.convert(e.def(CT::F64, fmt::format("kiln_f64((unsigned long long)a.imm[{}])", k)), CT::F64, ct_of(cd));
  return e.convert(e.def(CT::I64, fmt::format("a.imm[{}]", k)), CT::I64, ct_of(cd));
}

// Value v at loop index idx; memo holds what this loop body computed already.
Val KernelEmitter::value(uint32_t v, const std::vector<std::string>& idx, std::map<uint32_t, Val>& memo) {
  if (auto it = memo.find(v); it != memo.end()) return it->second;
  Val r;
  DType dt = body.type(v).dtype;
  auto stashed = final_pass ? stash.find(v) : stash.end();
  if (stashed != stash.end()) {
    r = load(n_in + stashed->second, idx);
  } else if (input_index[v] >= 0) {
    r = load(static_cast<size_t>(input_index[v]), idx);
  } else {
    size_t ni = static_cast<size_t>(producer.at(v));
    const ir::Node& n = body.nodes.at(ni);
    if (n.kind == ir::NodeKind::Const) {
      std::string c = is_float(dt) ? literal(n.constant.to(DType::F64).item<double>(), ct_of(dt))
                                   : int_literal(n.constant.to(DType::I64).item<int64_t>(), ct_of(dt));
      r = Val(&e, c, ct_of(dt));
    } else if (ir::fusible_reduction(n.op)) {
      auto a = acc.find(v);
      KILN_CHECK(a != acc.end(), "codegen: reduction %{} used before its pass", v);
      r = e.cast(a->second, accumulator_dtype(body.type(n.inputs[0]).dtype), dt);
    } else if (op_family(n.op) == OpFamily::Cast) {
      r = e.cast(value(n.inputs[0], idx, memo), body.type(n.inputs[0]).dtype, dt);
    } else if (n.op == OpId::Reshape || n.op == OpId::Expand) {
      r = value(n.inputs[0], idx, memo);  // same element, by the group's construction
    } else if (op_family(n.op) == OpFamily::Pointwise) {
      // f16/bf16 ops compute in f32 (numbers too) and round their result, as eagerly.
      DType cd = is_half(n.attrs.dtype) ? DType::F32 : n.attrs.dtype;
      std::vector<Val> args;
      for (int k = 0; k < op_arity(n.op); ++k) {
        int t = input_of_slot(n.attrs.imm_mask, k);
        if (t < 0) {
          args.push_back(immediate(ni, k, cd));
        } else {
          uint32_t u = n.inputs.at(static_cast<size_t>(t));
          args.push_back(e.cast(value(u, idx, memo), body.type(u).dtype, cd));
        }
      }
      r = pointwise(e, n.op, args);
      bool mask = op_def(n.op).promote == Promote::Compare || op_def(n.op).promote == Promote::Logical;
      DType produced = mask ? DType::Bool : cd;
      if (!mask && is_half(n.attrs.dtype)) {
        r = e.round_to(r, n.attrs.dtype);
        produced = n.attrs.dtype;
      }
      if (!mask && cd == DType::Bool) r = e.cast(r, DType::U8, DType::Bool);  // true + true is true
      if (produced != dt) r = e.cast(r, produced, dt);
    } else {
      throw Error(fmt::format("codegen: {} cannot be part of a CUDA kernel", op_name(n.op)));
    }
  }
  memo[v] = r;
  return r;
}


}  // namespace kiln::codegen::cuda_emit
