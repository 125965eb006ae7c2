// tools/fuzz/fuzz_ops.h -- a registered op for the IR fuzzers to reach: `fuzz::op`, taking a
// tensor and one attribute of every type, whose rule and kernel give the tensor back.
#pragma once

#include "runtime/registered_op.h"

namespace kiln::fuzz {

inline const bool kOpsRegistered = [] {
  register_op(
      "fuzz::op(Tensor x, int i=1, float f=0.5, bool b=False, int[] is=[], float[] fs=[1.5], str s='s', "
      "ScalarType d=f32) -> Tensor")
      .rule([](const OpCall& c) { return c.input(0).type(); })
      .cpu([](const OpCall& c) { return c.input(0).clone(); });
  return true;
}();

}  // namespace kiln::fuzz
