// runtime/ops/pointwise_defs.cpp -- every pointwise op's OpDef, generated from ops.def and its
// block in formulas.h (formula and derivative). Nothing here is written per op.
#include "runtime/api.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/pointwise.h"

namespace kiln {

#define KILN_POINTWISE_DEF(Name) const OpDef defs::Name = pointwise_def<fm::Name>();
#define OP(Name, name, arity, family) KILN_IF_POINTWISE_##family(KILN_POINTWISE_DEF(Name))
#include "runtime/ops.def"
#undef OP
#undef KILN_POINTWISE_DEF

}  // namespace kiln
