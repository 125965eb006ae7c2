// codegen/llvm/emit.h -- a fused group as LLVM IR text (no LLVM headers: the text is parsed by
// compile.cpp). Pointwise ops come from their formulas in runtime/ops/formulas.h, instantiated
// on an algebra whose values are IR registers, so eager and compiled code share one definition.
#pragma once

#include <string>

#include "codegen/backend.h"

namespace kiln::codegen {

/// The vector math the host offers: SLEEF's vector functions of these ISAs become the
/// loop vectorizer's variants of the scalar math calls.
struct MathTarget {
  bool fma = false;
  bool avx2 = false;
  bool avx512f = false;
};

std::string emit_llvm_ir(const ir::Graph& body, const KernelLayout& layout, const std::string& symbol,
                         const MathTarget& target);

}  // namespace kiln::codegen
