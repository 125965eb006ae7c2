// runtime/ops/defs.h -- declarations of every op's OpDef (each defined in its family's file).
#pragma once

#include "runtime/op.h"

namespace kiln::defs {
#define OP(Name, name, arity, family) extern const OpDef Name;
#include "runtime/ops.def"
#undef OP
}  // namespace kiln::defs
