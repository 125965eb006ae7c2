// codegen/cuda/emit_value.cpp -- a fused group's operands at one loop index, as CUDA C (the
// emission's state is in emit_kernel.h; each node's value from its inputs is codegen/lower.h's):
// where each operand's element lies, its load and store (f16 and bf16 held in a float), and
// pointwise immediates.
#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "codegen/cuda/emit_kernel.h"
#include "ir/graph.h"
#include "runtime/check.h"

namespace kiln::codegen::cuda_emit {

// Operand k's element at loop index idx: "((T*)a.data[k])[offset]".
std::string KernelEmitter::element(size_t k, const std::vector<std::string>& idx) {
  const OperandLayout& o = operand(k);
  std::string off;
  for (int d = 0; d < L.rank; ++d) {
    if (o.broadcast >> d & 1 || idx[d] == "0") continue;
    bool unit = d == L.rank - 1 && o.unit_inner;
    std::string term = unit              ? idx[d]
                       : options.index32 ? fmt::format("{} * (int)a.stride[{}]", idx[d], k * L.rank + d)
                                         : fmt::format("{} * a.stride[{}]", idx[d], k * L.rank + d);
    off += (off.empty() ? "" : " + ") + term;
  }
  if (partials && k >= n_in && !full_output(k - n_in)) off += (off.empty() ? "" : " + ") + std::string("part * rows");
  return fmt::format("(({}*)a.data[{}])[{}]", mem_name(operand_dtype(k)), k, off.empty() ? "0" : off);
}
Val KernelEmitter::load(size_t k, const std::vector<std::string>& idx) {
  DType dt = operand_dtype(k);
  std::string el = element(k, idx);
  if (auto r = vector_reg.find(k); r != vector_reg.end()) el = fmt::format("{}.v[{}]", r->second, vector_lane);
  if (dt == DType::F16) return e.def(CT::F32, fmt::format("kiln_h2f({})", el));
  if (dt == DType::BF16) return e.def(CT::F32, fmt::format("kiln_bf2f({})", el));
  return e.def(ct_of(dt), el);
}
std::string KernelEmitter::stored(size_t out, const Val& v) const {
  DType dt = body.type(body.outputs[out]).dtype;
  if (!is_half(dt)) return v.as(ct_of(dt));
  // The float holds a value of dt already: its bits, exactly.
  return fmt::format("{}({})", dt == DType::F16 ? "kiln_f2h" : "kiln_f2bf", v.number ? literal(v.c, CT::F32) : v.x);
}
void KernelEmitter::store(size_t out, const Val& v, const std::vector<std::string>& idx) {
  e.line(fmt::format("{} = {};", element(n_in + out, idx), stored(out, v)));
}

Val KernelEmitter::immediate(size_t node, int slot, DType cd) {
  const ir::Node& n = body.nodes[node];
  if (!options.immediates_as_args) return Val(&e, literal(n.attrs.imm[slot], cd), ct_of(cd));
  int k = imm_index.at({node, slot});
  if (is_float(cd))
    return e.convert(e.def(CT::F64, fmt::format("kiln_f64((unsigned long long)a.imm[{}])", k)), CT::F64, ct_of(cd));
  return e.convert(e.def(CT::I64, fmt::format("a.imm[{}]", k)), CT::I64, ct_of(cd));
}

}  // namespace kiln::codegen::cuda_emit
