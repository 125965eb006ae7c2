// codegen/backend.h -- what jit asks of a code generator, in std types only (no LLVM, no CUDA).
//
// A kernel computes one fused group (ir/fusion.h) over a loop nest whose sizes and strides it
// takes at run time, so one compiled kernel serves every size with the same structure: the
// structure (ops, dtypes, loop rank, which loop dims each operand broadcasts along, which have
// unit stride) is all the kernel's source depends on, and a hash of that source is its key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace kiln::ir {
struct Graph;
}

namespace kiln::codegen {

/// How a kernel reads or writes one operand.
struct OperandLayout {
  DType dtype = DType::F32;
  uint32_t broadcast = 0;   // bit d: stride 0 along loop dim d (the kernel never reads it)
  bool unit_inner = false;  // stride 1 along the last loop dim (known to the kernel)
};

/// The loop nest a group's kernel runs: the group's domain, with dims merged where every
/// operand allows it and size-1 dims dropped (jit::kernel_args in jit/plan.cpp decides this
/// from the real strides).
struct KernelLayout {
  int rank = 1;                        // loop dims, outermost first
  uint32_t reduced = 0;                // bit d: loop dim d is reduced
  int parallel_dim = -1;               // the dim whose range [begin, end) a call runs; -1: all
  std::vector<OperandLayout> inputs;   // one per body input
  std::vector<OperandLayout> outputs;  // one per body output (reduced ones broadcast along the
                                       // reduced dims)
};

/// Every kernel's entry point:
///   sizes[rank]: loop sizes; strides[(inputs + outputs) * rank]: element strides, inputs
///   first; data[inputs + outputs]: base pointers; [begin, end): the range of parallel_dim.
using KernelFn = void (*)(const int64_t* sizes, const int64_t* strides, void* const* data, int64_t begin, int64_t end);

/// One code generator. Thread-safe.
class Backend {
 public:
  virtual ~Backend() = default;
  /// What the machine code depends on besides the source: target, CPU features, compiler
  /// version. Part of the disk cache key.
  virtual const std::string& target_id() const = 0;
  /// The kernel's source (LLVM IR text): a pure function of the body's structure and `layout`,
  /// with `symbol` as its entry point. Throws kiln::Error for an op it cannot lower.
  virtual std::string emit(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol) const = 0;
  /// Optimizes and compiles source to an object file (bytes).
  virtual std::string compile(const std::string& source) const = 0;
  /// Links an object file into the process and returns its entry point `symbol`.
  virtual KernelFn load(const std::string& object, const std::string& symbol) = 0;
};

/// The host CPU's backend (LLVM), created on first use.
Backend& cpu_backend();

}  // namespace kiln::codegen
