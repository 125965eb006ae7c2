// tests/jit/random_ops.h -- named pointwise ops for random programs (random_program.cpp).
#pragma once

#include <span>

#include "runtime/tensor.h"

namespace kiln::test {

template <class F> struct NamedOp {
  const char* name;
  F fn;
};
using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);
using WithNumber = Tensor (*)(const Tensor&, double);

std::span<const NamedOp<Unary>> unary_ops();
std::span<const NamedOp<Binary>> binary_ops();
std::span<const NamedOp<WithNumber>> number_ops();

}  // namespace kiln::test
