// codegen/lower.h -- what every code generator shares to lower a fused group (its analysis is
// ir/group_analysis.h): the pointwise dispatch of runtime/ops.def onto the formulas, over any
// scalar algebra, and the group's values at a loop index (GroupLowering), written once. A
// target renders them: codegen/llvm as LLVM IR text, codegen/cuda as CUDA C text; a new
// target writes a scalar algebra, the hooks GroupLowering names, and its loops.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "codegen/backend.h"
#include "ir/group_analysis.h"
#include "runtime/check.h"
#include "runtime/ops/formulas.h"

namespace kiln::codegen::lower {

template <class V, class E, class Fm, size_t... K>
V apply_formula(E& e, const std::vector<V>& a, std::index_sequence<K...>) {
  auto r = Fm::f(a[K]...);
  if constexpr (std::is_same_v<decltype(r), V>) return r;
  else return e.bool_of(r);  // comparisons give masks, held as bool (0 or 1)
}

/// Pointwise op `op` of arguments `a` (in its compute dtype's register type), by its formula,
/// on the scalar algebra V (whose operators and math functions are found by ADL). Each target
/// instantiates it once, in its algebra's file, as its `pointwise(Emitter&, OpId, args)`.
template <class V, class E> V apply_pointwise(E& e, OpId op, const std::vector<V>& a) {
  switch (op) {
#define KILN_CASE_Pointwise(Name, arity) \
  case OpId::Name:                       \
    return apply_formula<V, E, fm::Name>(e, a, std::make_index_sequence<arity>());
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

/// `l` after checking that it fits `body`.
KernelLayout checked_layout(const ir::Graph& body, KernelLayout l);

/// The part of a fused group's kernel emitter that no target changes: the group, its loop
/// layout and analysis, which outputs are full-size, the stashes, and every value at a loop
/// index. `Derived` (a target's KernelEmitter) renders values on its scalar algebra V:
///   V load(size_t operand, idx)               operand k's element at idx, in a register
///   V float_constant(double, DType)           a constant of the body
///   V int_constant(int64_t, DType)
///   V immediate(size_t node, int slot, DType) a pointwise op's number, in compute dtype cd
///   std::optional<V> accumulator(uint32_t v)  a reduction's accumulator (nullopt: no pass yet)
///   e                                         its Emitter: cast(v, from, to), round_to(v, t)
/// and a free function pointwise(Emitter&, OpId, const std::vector<V>&) (apply_pointwise).
template <class Derived, class V> struct GroupLowering {
  GroupLowering(const ir::Graph& b, const KernelLayout& l)
      : body(b), L(checked_layout(b, l)), n_in(b.inputs.size()), n_out(b.outputs.size()), ga(b) {
    for (int d = 0; d < L.rank; ++d) {
      (L.reduced >> d & 1 ? reduced : kept).push_back(d);
      all.push_back(d);
    }
    for (size_t o = 0; o < n_out; ++o) full.push_back(full_output(o));
  }

  const ir::Graph& body;
  const KernelLayout L;
  size_t n_in, n_out;
  ir::GroupAnalysis ga;
  std::vector<int> kept, reduced, all;  // loop dims
  std::vector<char> full;               // per output: full_output
  std::map<uint32_t, size_t> stash;     // ga.plan_stash's, read back in the final pass
  bool final_pass = false;

  const OperandLayout& operand(size_t k) const { return k < n_in ? L.inputs[k] : L.outputs[k - n_in]; }
  DType operand_dtype(size_t k) const { return body.type(k < n_in ? body.inputs[k] : body.outputs[k - n_in]).dtype; }
  /// Whether output o is written at every loop index: it broadcasts along no dim, or the
  /// layout reduces none (a reduced output whose reduced dims all had size 1).
  bool full_output(size_t o) const { return operand(n_in + o).broadcast == 0 || L.reduced == 0; }

  /// Value v at loop index idx; memo holds what this loop body computed already.
  V value(uint32_t v, const std::vector<std::string>& idx, std::map<uint32_t, V>& memo) {
    if (auto it = memo.find(v); it != memo.end()) return it->second;
    Derived& d = static_cast<Derived&>(*this);
    auto& e = d.e;
    V r;
    DType dt = body.type(v).dtype;
    auto stashed = final_pass ? stash.find(v) : stash.end();
    if (stashed != stash.end()) {
      r = d.load(n_in + stashed->second, idx);
    } else if (ga.input_index[v] >= 0) {
      r = d.load(static_cast<size_t>(ga.input_index[v]), idx);
    } else {
      size_t ni = static_cast<size_t>(ga.producer.at(v));
      const ir::Node& n = body.nodes.at(ni);
      if (n.kind == ir::NodeKind::Const) {
        r = is_float(dt) ? d.float_constant(n.constant.to(DType::F64).item<double>(), dt)
                         : d.int_constant(n.constant.to(DType::I64).item<int64_t>(), dt);
      } else if (ga.is_reduction(v)) {
        std::optional<V> a = d.accumulator(v);
        KILN_CHECK(a.has_value(), "codegen: reduction %{} used before its pass", v);
        r = e.cast(*a, accumulator_dtype(body.type(n.inputs[0]).dtype), dt);
      } else if (op_family(n.op) == OpFamily::Cast) {
        r = e.cast(value(n.inputs[0], idx, memo), body.type(n.inputs[0]).dtype, dt);
      } else if (n.op == OpId::Reshape || n.op == OpId::Expand) {
        r = value(n.inputs[0], idx, memo);  // same element, by the group's construction
      } else if (op_family(n.op) == OpFamily::Pointwise) {
        // f16/bf16 ops compute in f32 (numbers too) and round their result, as eagerly.
        bool half = n.attrs.dtype == DType::F16 || n.attrs.dtype == DType::BF16;
        DType cd = half ? DType::F32 : n.attrs.dtype;
        std::vector<V> args;
        for (int k = 0; k < op_arity(n.op); ++k) {
          int t = input_of_slot(n.attrs.imm_mask, k);
          if (t < 0) {
            args.push_back(d.immediate(ni, k, cd));
          } else {
            uint32_t u = n.inputs.at(static_cast<size_t>(t));
            args.push_back(e.cast(value(u, idx, memo), body.type(u).dtype, cd));
          }
        }
        r = pointwise(e, n.op, args);
        bool mask = op_def(n.op).promote == Promote::Compare || op_def(n.op).promote == Promote::Logical;
        DType produced = mask ? DType::Bool : cd;
        if (!mask && half) {
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
};

}  // namespace kiln::codegen::lower
