// codegen/cuda/emit_reduce.cpp -- the reductions of a fused group's CUDA kernel (the emission's
// state is in emit_kernel.h; the passes that drive them are KernelEmitter::run in emit.cpp):
// which reduction inputs a full output stashes for the last pass, each reduction's identity and
// combine (as the eager kernels combine), and the combine across a block.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "codegen/cuda/emit_kernel.h"
#include "ir/graph.h"
#include "runtime/check.h"

namespace kiln::codegen::cuda_emit {

// The input of a last-level reduction that a full output is computed from is stored into
// that output while the pass reduces it, and read back by the final pass.
void KernelEmitter::plan_stash(const std::vector<Reduction>& reds, int max_level) {
  std::vector<char> taken = early;  // (stored by the first pass already)
  for (const Reduction& r : reds) {
    if (level[r.value] != max_level) continue;
    uint32_t v = body.nodes[producer[r.value]].inputs[0];
    if (producer[v] < 0 || body.nodes[producer[v]].kind != ir::NodeKind::Op || stash.count(v)) continue;
    for (size_t o = 0; o < n_out; ++o) {
      if (taken[o] || !full_output(o) || body.type(body.outputs[o]).dtype != body.type(v).dtype) continue;
      if (!reads(body.outputs[o], v)) continue;
      stash[v] = o;
      taken[o] = 1;
      break;
    }
  }
}
bool KernelEmitter::reads(uint32_t from, uint32_t v) const {
  if (from == v) return true;
  int p = producer[from];
  if (p < 0 || is_reduction(from)) return false;
  for (uint32_t u : body.nodes[static_cast<size_t>(p)].inputs)
    if (reads(u, v)) return true;
  return false;
}

std::string KernelEmitter::identity(OpId op, DType t) {
  Scalar v = reduction_identity(op_def(op).combine, t);
  return is_float(t) ? literal(v.to_double(), ct_of(t)) : int_literal(v.to_int(), ct_of(t));
}
// a combined with x, as the eager kernels combine (max and min: NaN wins).
std::string KernelEmitter::combine(OpId op, DType t, const std::string& a, const std::string& x) {
  CT ct = ct_of(t);
  switch (op_def(op).combine) {
    case Combine::Sum:
      return is_fp(ct) ? fmt::format("{} + {}", a, x)
                       : fmt::format("(long long)((unsigned long long){} + (unsigned long long){})", a, x);
    case Combine::Prod:
      return is_fp(ct) ? fmt::format("{} * {}", a, x)
                       : fmt::format("(long long)((unsigned long long){} * (unsigned long long){})", a, x);
    case Combine::Max: return fmt::format("({0} > {1} || {0} != {0}) ? {0} : {1}", a, x);
    case Combine::Min: return fmt::format("({0} < {1} || {0} != {0}) ? {0} : {1}", a, x);
    case Combine::None: break;
  }
  throw InternalError(fmt::format("codegen: {} is not a combining reduction", op_name(op)));
}

// Combines register `r` across the block; every thread ends with the block's result.
void KernelEmitter::block_reduce(const Reduction& red, const std::string& r) {
  const char* t = cname(ct_of(red.acc));
  std::string s = e.temp();
  e.line(fmt::format("for (int m = 16; m > 0; m /= 2) {{ {0} o = __shfl_xor_sync(0xffffffffu, {1}, m); {1} = {2}; }}",
                     t, r, combine(red.op, red.acc, r, "o")));
  e.line(fmt::format("{}* {} = kiln_shared<{}>();", t, s, t));
  e.line(fmt::format("if (threadIdx.x % 32 == 0) {}[threadIdx.x / 32] = {};", s, r));
  e.line("__syncthreads();");
  e.line("if (threadIdx.x < 32) {");
  ++e.indent;
  e.line(fmt::format("{0} w = threadIdx.x < blockDim.x / 32 ? {1}[threadIdx.x] : {2};", t, s, identity(red.op, red.acc)));
  e.line(fmt::format("for (int m = 16; m > 0; m /= 2) {{ {0} o = __shfl_xor_sync(0xffffffffu, w, m); w = {1}; }}", t,
                     combine(red.op, red.acc, "w", "o")));
  e.line(fmt::format("if (threadIdx.x == 0) {}[0] = w;", s));
  --e.indent;
  e.line("}");
  e.line("__syncthreads();");
  e.line(fmt::format("{} = {}[0];", r, s));
  e.line("__syncthreads();  // the slot is reused");
}

}  // namespace kiln::codegen::cuda_emit
