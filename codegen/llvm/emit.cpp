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
// - this file: each value per element (loads, the formulas through apply_formula<fm::Name>,
//   casts, stores), the entry block and the module text (declarations, attributes, loop
//   metadata).
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
#include "ir/fusion.h"
#include "ir/graph.h"
#include "runtime/check.h"
#include "runtime/ops/formulas.h"

namespace kiln::codegen::llvm_ir {
namespace {

// A formula's result as a value: comparisons give masks, held as bool (0 or 1).
Val result(Emitter&, const Val& v) { return v; }
Val result(Emitter& e, const Mask& m) { return e.bool_of(m); }

template <class Fm, size_t... K>
Val apply_formula(Emitter& e, const std::vector<Val>& a, std::index_sequence<K...>) {
  return result(e, Fm::f(a[K]...));
}

Val pointwise(Emitter& e, OpId op, const std::vector<Val>& a) {
  switch (op) {
#define KILN_CASE_Pointwise(Name, arity) \
  case OpId::Name: return apply_formula<fm::Name>(e, a, std::make_index_sequence<arity>());
#define KILN_CASE_Cast(Name, arity)
#define KILN_CASE_Reduce(Name, arity)
#define KILN_CASE_View(Name, arity)
#define KILN_CASE_Copy(Name, arity)
#define KILN_CASE_Other(Name, arity)
#define OP(Name, name, arity, family) KILN_CASE_##family(Name, arity)
#include "runtime/ops.def"
#undef OP
#undef KILN_CASE_Pointwise
#undef KILN_CASE_Cast
#undef KILN_CASE_Reduce
#undef KILN_CASE_View
#undef KILN_CASE_Copy
#undef KILN_CASE_Other
    default: break;
  }
  throw Error(fmt::format("codegen: {} is not a pointwise op", op_name(op)));
}

}  // namespace

KernelEmitter::KernelEmitter(const ir::Graph& b, const KernelLayout& l, const MathTarget& t)
    : body(b), L(l), e(t), n_in(b.inputs.size()), n_out(b.outputs.size()) {
  KILN_CHECK(L.inputs.size() == n_in && L.outputs.size() == n_out && L.rank >= 1 && L.rank <= 16,
             "codegen: layout does not fit the group ({} inputs, {} outputs)", n_in, n_out);
  producer.assign(b.types.size(), -1);
  input_index.assign(b.types.size(), -1);
  level.assign(b.types.size(), 0);
  for (size_t k = 0; k < n_in; ++k) input_index[b.inputs[k]] = static_cast<int>(k);
  for (size_t i = 0; i < b.nodes.size(); ++i) {
    const ir::Node& n = b.nodes[i];
    KILN_CHECK(n.kind == ir::NodeKind::Op || n.kind == ir::NodeKind::Const,
               "codegen: a fused body holds only op and const nodes");
    producer[n.result] = static_cast<int>(i);
    int lv = 0;
    for (uint32_t v : n.inputs) lv = std::max(lv, level[v]);
    level[n.result] = lv + (n.kind == ir::NodeKind::Op && ir::fusible_reduction(n.op) ? 1 : 0);
  }
}

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

// Value v at loop index idx; memo holds what this loop body has computed already.
Val KernelEmitter::value(uint32_t v, const std::vector<std::string>& idx, std::map<uint32_t, Val>& memo) {
  if (auto it = memo.find(v); it != memo.end()) return it->second;
  Val r;
  DType dt = body.type(v).dtype;
  auto stashed = final_pass ? stash.find(v) : stash.end();
  if (stashed != stash.end()) {
    r = load(address(n_in + stashed->second, idx), dt);
  } else if (input_index[v] >= 0) {
    r = load(address(static_cast<size_t>(input_index[v]), idx), dt);
  } else {
    const ir::Node& n = body.nodes.at(producer.at(v));
    if (n.kind == ir::NodeKind::Const) {
      std::string c = is_float(dt) ? literal(n.constant.to(DType::F64).item<double>(), ty_of(dt))
                                   : int_literal(n.constant.to(DType::I64).item<int64_t>(), ty_of(dt));
      r = Val(&e, c, ty_of(dt));
    } else if (ir::fusible_reduction(n.op)) {
      auto a = acc.find(v);
      KILN_CHECK(a != acc.end(), "codegen: reduction %{} used before its pass", v);
      Ty at = ty_of(accumulator_dtype(body.type(n.inputs[0]).dtype));
      Val x = e.inst(at, fmt::format("load {}, ptr {}", ll(at), a->second));
      r = e.cast(x, accumulator_dtype(body.type(n.inputs[0]).dtype), dt);
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
          args.push_back(Val(&e, literal(n.attrs.imm[k], cd), ty_of(cd)));
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
      throw Error(fmt::format("codegen: {} cannot be part of a fused kernel", op_name(n.op)));
    }
  }
  memo[v] = r;
  return r;
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
Val KernelEmitter::load(const std::string& p, DType dt) {
  Ty t = mem_ty(dt);
  Val x = e.inst(t, fmt::format("load {}, ptr {}", ll(t), p));
  return is_half(dt) ? e.half_value(x, dt) : x;
}

std::string KernelEmitter::run(const std::string& symbol) {
  // Entry: sizes, strides and pointers.
  for (int d = 0; d < L.rank; ++d)
    sizes.push_back(e.inst(Ty::I64, fmt::format("load i64, ptr {}", d == 0 ? "%sizes"
        : e.inst(Ty::I64, fmt::format("getelementptr i64, ptr %sizes, i64 {}", d)).r)).r);
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

  std::string out = fmt::format(
      "; kiln fused kernel: {} inputs, {} outputs, rank {}, reduced dims {:#x}, parallel dim {}\n",
      n_in, n_out, L.rank, L.reduced, L.parallel_dim);
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
    out += fmt::format("!{0} = distinct !{{!{0}, !{1}{3}}}\n!{1} = !{{!\"llvm.loop.vectorize.width\", i32 {2}}}\n", 2 * k,
                       2 * k + 1, lanes, e.loop_reduces[k] ? fmt::format(", !{}", interleave) : "");
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
