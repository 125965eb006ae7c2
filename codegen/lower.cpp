// codegen/lower.cpp -- the non-template part of codegen/lower.h.
#include "codegen/lower.h"

namespace kiln::codegen::lower {

KernelLayout checked_layout(const ir::Graph& body, KernelLayout l) {
  KILN_CHECK(
      l.inputs.size() == body.inputs.size() && l.outputs.size() == body.outputs.size() && l.rank >= 1 && l.rank <= 16,
      "codegen: layout does not fit the group ({} inputs, {} outputs)", body.inputs.size(), body.outputs.size());
  return l;
}

}  // namespace kiln::codegen::lower
