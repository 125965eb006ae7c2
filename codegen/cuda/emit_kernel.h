// codegen/cuda/emit_kernel.h -- private to codegen/cuda/emit*.cpp: the state of one kernel's
// emission, a fused group lowered to CUDA C (the design is in emit.h). Its parts live in
// emit.cpp (setup, loops and the kernel driver), emit_value.cpp (operands and the group's
// values at a loop index) and emit_reduce.cpp (reductions: stashes, combines, block reduce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/emit_scalar.h"
#include "ir/graph.h"

namespace kiln::codegen::cuda_emit {

struct KernelEmitter {
  const ir::Graph& body;
  const KernelLayout L;
  CudaEmitOptions options;
  Emitter e;
  size_t n_in, n_out;
  std::vector<int> producer, input_index, level;
  std::map<std::pair<size_t, int>, int> imm_index;  // (node, slot) -> a.imm index
  std::map<uint32_t, Val> acc;                      // reduction result -> its accumulator
  std::map<uint32_t, size_t> stash;                 // as the LLVM emitter's (see there)
  bool final_pass = false;
  std::vector<char> early;  // per output: a full output stored by the first pass
  bool partials = false;  // a reduction kernel: reduced outputs lie `part * rows` further
  struct Reduction {
    uint32_t value;
    OpId op;
    DType acc;
  };

  // emit.cpp
  KernelEmitter(const ir::Graph& b, const KernelLayout& l, const CudaEmitOptions& o);

  // emit_value.cpp: operands, and the group's values at a loop index.
  bool is_reduction(uint32_t v) const;
  const OperandLayout& operand(size_t k) const;
  DType operand_dtype(size_t k) const;
  bool full_output(size_t o) const;
  std::string element(size_t k, const std::vector<std::string>& idx);
  Val load(size_t k, const std::vector<std::string>& idx);
  void store(size_t out, const Val& v, const std::vector<std::string>& idx);
  Val immediate(size_t node, int slot, DType cd);
  Val value(uint32_t v, const std::vector<std::string>& idx, std::map<uint32_t, Val>& memo);

  // emit_reduce.cpp: reductions.
  void plan_stash(const std::vector<Reduction>& reds, int max_level);
  bool reads(uint32_t from, uint32_t v) const;
  std::string identity(OpId op, DType t);
  std::string combine(OpId op, DType t, const std::string& a, const std::string& x);
  void block_reduce(const Reduction& red, const std::string& r);

  // emit.cpp: loops, and the kernel.
  void coords(const std::vector<int>& dims, const std::string& linear, std::vector<std::string>& idx);
  std::string count(const std::vector<int>& dims);
  // The outputs computed at one loop index (before any is stored).
  struct Computed {
    std::vector<std::string> idx;
    std::vector<std::pair<size_t, Val>> out;  // (output, value)
  };
  Computed outputs_at(const std::vector<int>& dims, const std::string& i, const std::vector<std::string>& base,
                      bool full_only = false);
  void store_all(const Computed& c);
  template <class Load, class Use>
  void unrolled_loop(const std::string& start, const std::string& limit, const std::string& step, Load load, Use use);
  std::string loops();
  std::string args_struct(const std::string& name, const std::string& more) const;
};

}  // namespace kiln::codegen::cuda_emit
