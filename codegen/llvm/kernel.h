// codegen/llvm/kernel.h -- private to codegen/llvm: KernelEmitter, which writes one fused group's
// kernel on the scalar algebra of scalar.h. Computing a value per element (loads, the formulas,
// casts, stores) and the kernel's module text are in emit.cpp; the loop nests, reduction passes
// and their accumulators in loops.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/llvm/emit.h"
#include "codegen/llvm/scalar.h"
#include "ir/fusion.h"
#include "ir/graph.h"

namespace kiln::codegen::llvm_ir {

struct KernelEmitter {
  const ir::Graph& body;
  const KernelLayout& L;
  Emitter e;
  size_t n_in, n_out;
  std::vector<int> producer;    // body value -> node index, -1 for inputs
  std::vector<int> input_index; // body value -> input slot, -1 otherwise
  std::vector<int> level;       // reductions on the value's longest path
  std::vector<std::string> sizes;
  std::vector<std::vector<std::string>> strides;  // per operand, per dim ("" when known)
  std::vector<std::string> ptrs;
  std::map<uint32_t, std::string> acc;  // reduction node result -> its accumulator alloca
  struct Reduction {
    uint32_t value;
    OpId op;
    DType acc;
  };
  // A full value the last reduction pass computes anyway (softmax's exp(x - max)) that a full
  // output needs too: the pass stores it into that output, and the final pass reads it back
  // instead of computing it again. value -> output slot.
  std::map<uint32_t, size_t> stash;
  bool final_pass = false;
  bool reducing = false;  // emitting a reduction pass: its innermost loop interleaves

  KernelEmitter(const ir::Graph& b, const KernelLayout& l, const MathTarget& t);

  bool is_reduction(uint32_t v) const {
    int p = producer[v];
    return p >= 0 && body.nodes[p].kind == ir::NodeKind::Op && ir::fusible_reduction(body.nodes[p].op);
  }
  const OperandLayout& operand(size_t k) const { return k < n_in ? L.inputs[k] : L.outputs[k - n_in]; }
  DType operand_dtype(size_t k) const {
    return body.type(k < n_in ? body.inputs[k] : body.outputs[k - n_in]).dtype;
  }

  // Values and memory (emit.cpp).
  std::string address(size_t k, const std::vector<std::string>& idx);
  Val value(uint32_t v, const std::vector<std::string>& idx, std::map<uint32_t, Val>& memo);
  void store(size_t out, const Val& v, const std::vector<std::string>& idx);
  Val load(const std::string& p, DType dt);

  // Loops and reductions (loops.cpp).
  template <class Full> void plan_stash(const std::vector<Reduction>& reds, int max_level, const Full& full_output);
  bool reads(uint32_t from, uint32_t v) const;
  void loops(const std::vector<int>& dims, size_t at, std::vector<std::string>& idx,
             const std::function<void(std::vector<std::string>&)>& fn);
  void prefetch_next_row(std::vector<std::string>& ix, const std::vector<int>& kept, const std::vector<int>& reduced);
  std::string identity(OpId op, DType t);
  Val combine(OpId op, DType t, const Val& a, const Val& x);
  void emit_loops();

  // The kernel's module text (emit.cpp).
  std::string run(const std::string& symbol);
};

}  // namespace kiln::codegen::llvm_ir
