// codegen/cuda/emit_kernel.h -- private to codegen/cuda/emit*.cpp: the state of one kernel's
// emission, a fused group lowered to CUDA C (the design is in emit.h). Its values at a loop
// index are codegen/lower.h's; its parts live in emit.cpp (setup, loops and the kernel
// driver), emit_value.cpp (operands) and emit_reduce.cpp (combines, block reduce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/emit_scalar.h"
#include "codegen/lower.h"
#include "ir/graph.h"

namespace kiln::codegen::cuda_emit {

// A kernel's values are codegen/lower.h's (GroupLowering), on this algebra; the rest is the CUDA
// C text: elements, loads and stores, immediates, the loops and the reductions across a block.
struct KernelEmitter : lower::GroupLowering<KernelEmitter, Val> {
  CudaEmitOptions options;
  Emitter e;
  std::map<std::pair<size_t, int>, int> imm_index;  // (node, slot) -> a.imm index
  std::map<uint32_t, Val> acc;                      // reduction result -> its accumulator
  std::vector<char> early;                          // per output: a full output stored by the first pass
  bool partials = false;                            // a reduction kernel: reduced outputs lie `part * rows` further
  // In vector_loop: the element of the four being computed, and each contiguous input's
  // kiln_vec4 holding them (load() reads it).
  int vector_lane = -1;
  std::map<size_t, std::string> vector_reg;

  // emit.cpp
  KernelEmitter(const ir::Graph& b, const KernelLayout& l, const CudaEmitOptions& o);

  // emit_value.cpp: operands (GroupLowering's hooks among them).
  std::string element(size_t k, const std::vector<std::string>& idx);
  Val load(size_t k, const std::vector<std::string>& idx);
  void store(size_t out, const Val& v, const std::vector<std::string>& idx);
  std::string stored(size_t out, const Val& v) const;  // output out's bits for value v
  Val immediate(size_t node, int slot, DType cd);
  Val float_constant(double x, DType t) { return Val(&e, literal(x, ct_of(t)), ct_of(t)); }
  Val int_constant(int64_t x, DType t) { return Val(&e, int_literal(x, ct_of(t)), ct_of(t)); }
  std::optional<Val> accumulator(uint32_t v) {
    auto a = acc.find(v);
    return a == acc.end() ? std::nullopt : std::optional<Val>(a->second);
  }

  // emit_reduce.cpp: reductions.
  std::string identity(OpId op, DType t);
  std::string combine(OpId op, DType t, const std::string& a, const std::string& x);
  void block_reduce(const ir::GroupReduction& red, const std::string& r);

  // emit.cpp: loops, and the kernel.
  void coords(const std::vector<int>& dims, const std::string& linear, std::vector<std::string>& idx);
  std::string count(const std::vector<int>& dims);
  std::string size(int d) const;  // loop dim d's size, as the kernel's index type
  const char* ix() const { return options.index32 ? "int" : "long long"; }  // the index type
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
  bool vectorizable() const;
  void vector_loop(const std::string& first);
  std::string loops();
  std::string args_struct(const std::string& name, const std::string& more) const;
};

}  // namespace kiln::codegen::cuda_emit
