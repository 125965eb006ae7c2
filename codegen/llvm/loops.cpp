// codegen/llvm/loops.cpp -- the LLVM emitter's loop structure: the loop nests of a fused group's
// kernel, its reduction passes and their accumulators (KernelEmitter in kernel.h).
//
// The loops are written plainly (counters and accumulators in allocas, which compile.cpp's O3
// pipeline promotes to registers); each innermost loop gets an !llvm.loop node (its vector
// width and, for a reduction pass, an interleave count; run() in emit.cpp writes the nodes).
// Reductions combine with `reassoc` adds/multiplies so that they vectorize: their order differs
// from the eager kernels', within float rounding.
//
// Loop structure, for a layout of rank r:
// - no reduction: one loop nest over all dims, storing every output per element;
// - reductions over trailing dims: for each kept index, one pass over the reduced dims per
//   reduction level (softmax: max, then sum), then a last pass that stores the full outputs;
//   reduced outputs are stored after the pass that completes them;
// - reductions over other dims (no ops after them in the group): when the innermost dim is
//   reduced, as above; else outputs start at the identity, then one loop nest over all dims
//   combines each element into its output (the innermost loop runs over kept indices).
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/llvm/kernel.h"
#include "ir/fusion.h"
#include "ir/graph.h"
#include "runtime/check.h"

namespace kiln::codegen::llvm_ir {

// Emits nested loops over `dims` (in order) around body(idx).
void KernelEmitter::loops(const std::vector<int>& dims, size_t at, std::vector<std::string>& idx,
                          const std::function<void(std::vector<std::string>&)>& fn) {
  if (at == dims.size()) {
    fn(idx);
    return;
  }
  int d = dims[at];
  std::string counter = e.alloca_of(Ty::I64, "i");
  std::string lo = d == L.parallel_dim ? "%begin" : "0";
  std::string hi = d == L.parallel_dim ? "%end" : sizes[d];
  e.line(fmt::format("store i64 {}, ptr {}", lo, counter));
  std::string head = e.label(), loop = e.label(), done = e.label();
  e.line("br label %" + head);
  e.block(head);
  Val i = e.inst(Ty::I64, fmt::format("load i64, ptr {}", counter));
  Val c = e.inst(Ty::I8, fmt::format("icmp slt i64 {}, {}", i.r, hi));
  e.line(fmt::format("br i1 {}, label %{}, label %{}", c.r, loop, done));
  e.block(loop);
  std::string saved = idx[d];
  idx[d] = i.r;
  loops(dims, at + 1, idx, fn);
  idx[d] = saved;
  Val n = e.inst(Ty::I64, fmt::format("add nsw i64 {}, 1", i.r));
  e.line(fmt::format("store i64 {}, ptr {}", n.r, counter));
  // Innermost loops carry a vector width: LLVM's cost model prices calls to vector math
  // variants too high and would keep them scalar.
  if (at + 1 == dims.size()) {
    e.line(fmt::format("br label %{}, !llvm.loop !{}", head, 2 * e.loop_mds++));
    e.loop_reduces.push_back(reducing);
  } else {
    e.line("br label %" + head);
  }
  e.block(done);
}

// Prefetches the next kept index's row of each input read along it (softmax's next row), one
// cache line at a time, while this row's passes compute from cache: else each row's loads wait
// for memory after the last row's compute instead of beside it (softmax over [4096,1024] on 2
// threads: 2.2 to 1.75 ms). For a single reduced dim, the innermost, read with unit stride.
void KernelEmitter::prefetch_next_row(std::vector<std::string>& ix) {
  int inner = L.rank - 1;
  if (kept.empty() || reduced.size() != 1 || reduced[0] != inner) return;
  int row = kept.back();
  std::vector<size_t> rows;
  int64_t widest = 1;
  for (size_t k = 0; k < n_in; ++k) {
    const OperandLayout& o = operand(k);
    if (o.broadcast >> row & 1 || o.broadcast >> inner & 1 || !o.unit_inner) continue;
    rows.push_back(k);
    widest = std::max(widest, dtype_size(operand_dtype(k)));
  }
  if (rows.empty()) return;
  e.decls.insert("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)");
  std::string saved = ix[row];
  ix[row] = e.inst(Ty::I64, fmt::format("add i64 {}, 1", saved)).r;
  std::string counter = e.alloca_of(Ty::I64, "pf");
  e.line(fmt::format("store i64 0, ptr {}", counter));
  std::string head = e.label(), body_label = e.label(), done = e.label();
  e.line("br label %" + head);
  e.block(head);
  Val j = e.inst(Ty::I64, fmt::format("load i64, ptr {}", counter));
  Val more = e.inst(Ty::I8, fmt::format("icmp slt i64 {}, {}", j.r, sizes[inner]));
  e.line(fmt::format("br i1 {}, label %{}, label %{}", more.r, body_label, done));
  e.block(body_label);
  ix[inner] = j.r;
  for (size_t k : rows) e.line(fmt::format("call void @llvm.prefetch.p0(ptr {}, i32 0, i32 3, i32 1)", address(k, ix)));
  ix[inner] = "0";
  e.line(
      fmt::format("store i64 {}, ptr {}", e.inst(Ty::I64, fmt::format("add i64 {}, {}", j.r, 64 / widest)).r, counter));
  e.line("br label %" + head);
  e.block(done);
  ix[row] = saved;
}

// The reduction's starting value, as the eager kernels start from (runtime/op.h).
std::string KernelEmitter::identity(OpId op, DType t) {
  Scalar v = reduction_identity(op_def(op).combine, t);
  return is_float(t) ? literal(v.to_double(), ty_of(t)) : std::to_string(v.to_int());
}
// acc op x, vectorizable: reassociation allowed for float sums and products.
Val KernelEmitter::combine(OpId op, DType t, const Val& a, const Val& x) {
  Ty ty = ty_of(t);
  bool f = is_fp(ty);
  const char* minmax = nullptr;
  switch (op_def(op).combine) {
    case Combine::Sum: return e.inst(ty, fmt::format("{} {} {}, {}", f ? "fadd reassoc" : "add", ll(ty), a.r, x.r));
    case Combine::Prod: return e.inst(ty, fmt::format("{} {} {}, {}", f ? "fmul reassoc" : "mul", ll(ty), a.r, x.r));
    case Combine::Max: minmax = f ? "maximum" : "smax"; break;
    case Combine::Min: minmax = f ? "minimum" : "smin"; break;
    case Combine::None: throw InternalError(fmt::format("codegen: {} is not a combining reduction", op_name(op)));
  }
  std::string fn = fmt::format("llvm.{}.{}", minmax, f ? (ty == Ty::F32 ? "f32" : "f64") : "i64");
  e.decls.insert(fmt::format("declare {0} @{1}({0}, {0})", ll(ty), fn));
  return e.inst(ty, fmt::format("call {0} @{1}({0} {2}, {0} {3})", ll(ty), fn, a.r, x.r));
}

// The kernel's loops, as the top of this file lays out: called by run() (emit.cpp) once the
// entry block has loaded the sizes, strides and pointers.
void KernelEmitter::emit_loops() {
  const std::vector<ir::GroupReduction>& reds = ga.reductions;
  const int max_level = ga.max_level;
  std::vector<std::string> idx(L.rank, "0");
  bool trailing = true;
  for (size_t k = 0; k + 1 < all.size(); ++k)
    if ((L.reduced >> k & 1) && !(L.reduced >> (k + 1) & 1)) trailing = false;

  if (trailing && !reds.empty()) stash = ga.plan_stash(full, std::vector<char>(n_out, 0));
  if (reds.empty()) {
    loops(all, 0, idx, [&](std::vector<std::string>& ix) {
      std::map<uint32_t, Val> memo;
      for (size_t o = 0; o < n_out; ++o) store(o, value(body.outputs[o], ix, memo), ix);
    });
  } else if (trailing || (L.reduced >> (L.rank - 1) & 1)) {
    // Per kept index, passes over the reduced dims (accumulating in registers). Also for
    // reductions over leading dims when the innermost dim is reduced too: combining each
    // element into its output in memory would chain every step of the innermost loop.
    loops(kept, 0, idx, [&](std::vector<std::string>& ix) {
      prefetch_next_row(ix);
      for (int lv = 1; lv <= max_level; ++lv) {
        for (const ir::GroupReduction& r : reds) {
          if (ga.level[r.value] != lv) continue;
          std::string a = acc[r.value] = e.alloca_of(ty_of(r.acc), "acc");
          e.line(fmt::format("store {} {}, ptr {}", ll(ty_of(r.acc)), identity(r.op, r.acc), a));
        }
        reducing = true;
        loops(reduced, 0, ix, [&](std::vector<std::string>& jx) {
          std::map<uint32_t, Val> memo;
          for (const ir::GroupReduction& r : reds) {
            if (ga.level[r.value] != lv) continue;
            const ir::Node& n = body.nodes[ga.producer[r.value]];
            Val in = value(n.inputs[0], jx, memo);
            if (auto st = stash.find(n.inputs[0]); st != stash.end() && lv == max_level) store(st->second, in, jx);
            Val x = e.cast(in, body.type(n.inputs[0]).dtype, r.acc);
            Ty at = ty_of(r.acc);
            Val cur = e.inst(at, fmt::format("load {}, ptr {}", ll(at), acc[r.value]));
            e.line(fmt::format("store {} {}, ptr {}", ll(at), combine(r.op, r.acc, cur, x).r, acc[r.value]));
          }
        });
        reducing = false;
        std::map<uint32_t, Val> memo;  // reduced outputs this pass completed, at reduced index 0
        for (size_t o = 0; o < n_out; ++o)
          if (!full_output(o) && ga.level[body.outputs[o]] == lv) store(o, value(body.outputs[o], ix, memo), ix);
      }
      bool any_full = false;
      for (size_t o = 0; o < n_out; ++o) any_full = any_full || full_output(o);
      final_pass = true;
      if (any_full)
        loops(reduced, 0, ix, [&](std::vector<std::string>& jx) {
          std::map<uint32_t, Val> memo;
          for (size_t o = 0; o < n_out; ++o)
            if (full_output(o)) store(o, value(body.outputs[o], jx, memo), jx);
        });
      final_pass = false;
    });
  } else {
    // Outputs start at the identity (exact in the output's dtype: the accumulator's would
    // not be, INT64_MIN as an i32); then every element is combined into its output, in the
    // accumulator's dtype as the other loops combine.
    loops(kept, 0, idx, [&](std::vector<std::string>& ix) {
      for (size_t o = 0; o < n_out; ++o) {
        if (full_output(o)) continue;
        const ir::Node& n = body.nodes.at(ga.producer.at(body.outputs[o]));
        DType dt = body.type(body.outputs[o]).dtype;
        store(o, Val(&e, identity(n.op, dt), ty_of(dt)), ix);
      }
    });
    loops(all, 0, idx, [&](std::vector<std::string>& ix) {
      std::map<uint32_t, Val> memo;
      for (size_t o = 0; o < n_out; ++o) {
        uint32_t v = body.outputs[o];
        if (full_output(o)) {
          store(o, value(v, ix, memo), ix);
          continue;
        }
        KILN_CHECK(ga.is_reduction(v), "codegen: after a reduction over leading dims only its result can leave");
        const ir::Node& n = body.nodes[ga.producer[v]];
        DType dt = body.type(v).dtype, in_dt = body.type(n.inputs[0]).dtype, acc_dt = accumulator_dtype(in_dt);
        Ty t = ty_of(dt);
        Val x = e.cast(value(n.inputs[0], ix, memo), in_dt, acc_dt);
        std::string p = address(n_in + o, ix);
        Val cur = e.cast(e.inst(t, fmt::format("load {}, ptr {}", ll(t), p)), dt, acc_dt);
        e.line(fmt::format("store {} {}, ptr {}", ll(t), e.cast(combine(n.op, acc_dt, cur, x), acc_dt, dt).r, p));
      }
    });
  }
}

}  // namespace kiln::codegen::llvm_ir
