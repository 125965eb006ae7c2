// codegen/cuda/emit_reduce.cpp -- the reductions of a fused group's CUDA kernel (the emission's
// state is in emit_kernel.h; the passes that drive them are KernelEmitter::loops in emit.cpp,
// the stashes ir/group_analysis.h's): each reduction's identity and combine (as the eager
// kernels combine), and the combine across a block.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "codegen/cuda/emit_kernel.h"
#include "ir/graph.h"
#include "runtime/check.h"

namespace kiln::codegen::cuda_emit {

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
void KernelEmitter::block_reduce(const ir::GroupReduction& red, const std::string& r) {
  const char* t = cname(ct_of(red.acc));
  std::string s = e.temp();
  e.line(fmt::format("for (int m = 16; m > 0; m /= 2) {{ {0} o = __shfl_xor_sync(0xffffffffu, {1}, m); {1} = {2}; }}",
                     t, r, combine(red.op, red.acc, r, "o")));
  e.line(fmt::format("{}* {} = kiln_shared<{}>();", t, s, t));
  e.line(fmt::format("if (threadIdx.x % 32 == 0) {}[threadIdx.x / 32] = {};", s, r));
  e.line("__syncthreads();");
  e.line("if (threadIdx.x < 32) {");
  ++e.indent;
  e.line(
      fmt::format("{0} w = threadIdx.x < blockDim.x / 32 ? {1}[threadIdx.x] : {2};", t, s, identity(red.op, red.acc)));
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
