// codegen/llvm/kernel.h -- private to codegen/llvm: KernelEmitter, which writes one fused group's
// kernel on the scalar algebra of scalar.h. Its values per element are codegen/lower.h's; its
// addresses, loads, stores and module text are in emit.cpp; the loop nests, reduction passes
// and their accumulators in loops.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/llvm/emit.h"
#include "codegen/llvm/scalar.h"
#include "codegen/lower.h"
#include "ir/graph.h"

namespace kiln::codegen::llvm_ir {

// A kernel's values are codegen/lower.h's (GroupLowering), on this algebra; the rest is the LLVM
// text: addresses, loads and stores, the loop nests and accumulators.
struct KernelEmitter : lower::GroupLowering<KernelEmitter, Val> {
  Emitter e;
  std::vector<std::string> sizes;
  std::vector<std::vector<std::string>> strides;  // per operand, per dim ("" when known)
  std::vector<std::string> ptrs;
  std::map<uint32_t, std::string> acc;  // reduction node result -> its accumulator alloca
  bool reducing = false;                // emitting a reduction pass: its innermost loop interleaves

  KernelEmitter(const ir::Graph& b, const KernelLayout& l, const MathTarget& t);

  // GroupLowering's hooks (emit.cpp).
  Val load(size_t k, const std::vector<std::string>& idx) { return load_at(address(k, idx), operand_dtype(k)); }
  Val float_constant(double x, DType t) { return Val(&e, literal(x, ty_of(t)), ty_of(t)); }
  Val int_constant(int64_t x, DType t) { return Val(&e, int_literal(x, ty_of(t)), ty_of(t)); }
  Val immediate(size_t node, int slot, DType cd) {
    return Val(&e, literal(body.nodes[node].attrs.imm[slot], cd), ty_of(cd));
  }
  std::optional<Val> accumulator(uint32_t v);

  // Memory (emit.cpp).
  std::string address(size_t k, const std::vector<std::string>& idx);
  void store(size_t out, const Val& v, const std::vector<std::string>& idx);
  Val load_at(const std::string& p, DType dt);

  // Loops and reductions (loops.cpp).
  void loops(const std::vector<int>& dims, size_t at, std::vector<std::string>& idx,
             const std::function<void(std::vector<std::string>&)>& fn);
  void prefetch_next_row(std::vector<std::string>& ix);
  std::string identity(OpId op, DType t);
  Val combine(OpId op, DType t, const Val& a, const Val& x);
  void emit_loops();

  // The kernel's module text (emit.cpp).
  std::string run(const std::string& symbol);
};

}  // namespace kiln::codegen::llvm_ir
