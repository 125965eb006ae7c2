// tests/ops/op_specs_collective.h -- the Spec of all_reduce, over a group of this process alone.
#pragma once

#include <string>
#include <vector>

#include "runtime/collective.h"
#include "tests/distributed/solo_group.h"
#include "tests/ops/op_specs_common.h"

namespace kiln::test {

// all_reduce over a group of this process alone: the reduction is the operand itself.
template <> struct Spec<OpId::AllReduce> {
  static std::vector<DType> dtypes() { return {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8}; }
  static std::vector<Case> cases(DType t) {
    std::vector<Case> out;
    for (Combine c : {Combine::Sum, Combine::Max, Combine::Min}) {
      auto run = [c](std::span<const Tensor> in) { return all_reduce_op(in[0], solo_group().id(), c); };
      auto ref = [](std::span<const Ref> r) { return r[0]; };
      std::string name(combine_name(c));
      out.push_back({name, {values({3, 5}, t)}, run, ref});
      out.push_back({name + "_transposed", {transposed(4, 3, t)}, run, ref});
    }
    return out;
  }
};

}  // namespace kiln::test
