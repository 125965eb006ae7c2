// runtime/ops/defs.h -- declarations of every op's OpDef (each defined in its family's file),
// and the registration of the ops whose definition lives above the runtime.
#pragma once

#include <span>

#include "runtime/op.h"

namespace kiln::defs {
#define OP(Name, name, arity, family) extern const OpDef Name;
#include "runtime/ops.def"
#undef OP
}  // namespace kiln::defs

namespace kiln {

/// The shape rule of an op whose meaning lives in a layer above the runtime (rnn's is nn's
/// unrolled stack): its OpDef until that layer registers one; throws kiln::Error saying so.
TensorType unregistered_op(OpId id, std::span<const Tensor> in, const Attrs& attrs);
/// Makes `def` op `id`'s definition, as the recorder and the collective engine are installed:
/// from above, when the library loads (before any op runs). Only an op whose OpDef is the
/// runtime's stand-in (infer = unregistered_op) may be registered, once.
void register_op_def(OpId id, const OpDef& def);

}  // namespace kiln
