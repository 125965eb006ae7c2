// codegen/llvm/emit.cpp -- lowers a fused group to LLVM IR text.
//
// The code is written plainly (loop counters and accumulators in allocas, scalar math calls);
// the O3 pipeline in compile.cpp promotes them to registers, hoists what is invariant and
// vectorizes the inner loops.
//
// The lowering, by file:
// - scalar.h, scalar.cpp: the scalar algebra the formulas run on (IR types and literals, casts,
//   f16/bf16, the operators);
// - math.cpp: its math functions (SLEEF calls with their vector variants, LLVM intrinsics, f32
//   exp, tanh and erf inline);
// - kernel.h: KernelEmitter, one group's kernel; loops.cpp: its loop nests and reduction passes;
// - codegen/lower.h: each value per element (the formulas, casts), shared with the CUDA emitter;
// - this file: addresses, loads and stores, the entry block and the module text (declarations,
//   attributes, loop metadata).
#include "codegen/llvm/emit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/llvm/kernel.h"
#include "codegen/llvm/scalar.h"
#include "ir/graph.h"
#include "runtime/check.h"

namespace kiln::codegen::llvm_ir {

KernelEmitter::KernelEmitter(const ir::Graph& b, const KernelLayout& l, const MathTarget& t)
    : GroupLowering(b, l), e(t) {}

// The address of operand k's element at loop index `idx`.
std::string KernelEmitter::address(size_t k, const std::vector<std::string>& idx) {
  const OperandLayout& o = operand(k);
  std::string off;
  for (int d = 0; d < L.rank; ++d) {
    if (o.broadcast >> d & 1 || idx[d] == "0") continue;
    std::string term = idx[d];
    if (!strides[k][d].empty()) term = e.inst(Ty::I64, fmt::format("mul i64 {}, {}", idx[d], strides[k][d])).r;
    off = off.empty() ? term : e.inst(Ty::I64, fmt::format("add i64 {}, {}", off, term)).r;
  }
  if (off.empty()) off = "0";
  Ty t = mem_ty(operand_dtype(k));
  return e.inst(Ty::I64, fmt::format("getelementptr {}, ptr {}, i64 {}", ll(t), ptrs[k], off)).r;
}

std::optional<Val> KernelEmitter::accumulator(uint32_t v) {
  auto a = acc.find(v);
  if (a == acc.end()) return std::nullopt;
  Ty at = ty_of(accumulator_dtype(body.type(body.nodes[ga.producer[v]].inputs[0]).dtype));
  return e.inst(at, fmt::format("load {}, ptr {}", ll(at), a->second));
}

void KernelEmitter::store(size_t out, const Val& v, const std::vector<std::string>& idx) {
  DType dt = body.type(body.outputs[out]).dtype;
  std::string p = address(n_in + out, idx);
  if (is_half(dt)) {  // the register already holds a value of dt: its bits, exactly
    Val f = v.number ? Val(&e, literal(v.c, Ty::F32), Ty::F32) : v;
    e.line(fmt::format("store i16 {}, ptr {}", e.half_bits(f, dt).r, p));
    return;
  }
  Ty t = ty_of(dt);
  e.line(fmt::format("store {} {}, ptr {}", ll(t), v.as(t), p));
}
Val KernelEmitter::load_at(const std::string& p, DType dt) {
  Ty t = mem_ty(dt);
  Val x = e.inst(t, fmt::format("load {}, ptr {}", ll(t), p));
  return is_half(dt) ? e.half_value(x, dt) : x;
}

std::string KernelEmitter::run(const std::string& symbol) {
  // Entry: sizes, strides and pointers.
  for (int d = 0; d < L.rank; ++d)
    sizes.push_back(
        e.inst(Ty::I64,
               fmt::format(
                   "load i64, ptr {}",
                   d == 0 ? "%sizes" : e.inst(Ty::I64, fmt::format("getelementptr i64, ptr %sizes, i64 {}", d)).r))
            .r);
  size_t n_ops = n_in + n_out;
  strides.resize(n_ops);
  for (size_t k = 0; k < n_ops; ++k) {
    const OperandLayout& o = operand(k);
    for (int d = 0; d < L.rank; ++d) {
      if (o.broadcast >> d & 1 || (d == L.rank - 1 && o.unit_inner)) {
        strides[k].push_back("");
        continue;
      }
      Val p = e.inst(Ty::I64, fmt::format("getelementptr i64, ptr %strides, i64 {}", k * L.rank + d));
      strides[k].push_back(e.inst(Ty::I64, fmt::format("load i64, ptr {}", p.r)).r);
    }
    Val pp = e.inst(Ty::I64, fmt::format("getelementptr ptr, ptr %data, i64 {}", k));
    ptrs.push_back(e.inst(Ty::I64, fmt::format("load ptr, ptr {}", pp.r)).r);
  }

  emit_loops();

  std::string out =
      fmt::format("; kiln fused kernel: {} inputs, {} outputs, rank {}, reduced dims {:#x}, parallel dim {}\n", n_in,
                  n_out, L.rank, L.reduced, L.parallel_dim);
  out += fmt::format(
      "define void @{}(ptr noalias nocapture readonly %sizes, ptr noalias nocapture readonly %strides, "
      "ptr noalias nocapture readonly %data, i64 %begin, i64 %end) #0 {{\nentry:\n",
      symbol);
  out += e.allocas + e.text;
  out += "  ret void\n}\n\n";
  for (const std::string& d : e.decls) out += d + "\n";
  if (!e.vector_fns.empty()) {
    std::vector<std::string> used;
    for (const std::string& f : e.vector_fns) used.push_back("ptr @" + f);
    out += fmt::format("@llvm.compiler.used = appending global [{} x ptr] [{}], section \"llvm.metadata\"\n",
                       used.size(), fmt::join(used, ", "));
  }
  out += "\nattributes #0 = { nounwind }\n";
  for (const std::string& a : e.attr_groups) out += a + "\n";
  int lanes = (e.target.avx512f ? 16 : e.target.avx2 ? 8 : 4) / (e.f64_math ? 2 : 1);
  // A reduction's loop also runs 4 vectors of accumulators at once: one would chain every
  // step through the add's (or the max's) latency (softmax's row passes: about 20% faster).
  int interleave = 2 * e.loop_mds;
  if (e.loop_mds > 0) out += fmt::format("!{} = !{{!\"llvm.loop.interleave.count\", i32 4}}\n", interleave);
  for (int k = 0; k < e.loop_mds; ++k)
    out += fmt::format("!{0} = distinct !{{!{0}, !{1}{3}}}\n!{1} = !{{!\"llvm.loop.vectorize.width\", i32 {2}}}\n",
                       2 * k, 2 * k + 1, lanes, e.loop_reduces[k] ? fmt::format(", !{}", interleave) : "");
  return out;
}

}  // namespace kiln::codegen::llvm_ir

namespace kiln::codegen {

std::string emit_llvm_ir(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol,
                         const MathTarget& target) {
  llvm_ir::KernelEmitter k(body, layout, target);
  return k.run(symbol);
}

}  // namespace kiln::codegen
