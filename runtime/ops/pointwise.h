// runtime/ops/pointwise.h -- running pointwise ops from the API (promotion, immediates).
#pragma once

#include <initializer_list>

#include "runtime/op.h"

namespace kiln {

/// A pointwise operand: a tensor, or a number kept as an immediate (never boxed).
struct Operand {
  Operand(const Tensor& t) : tensor(&t) {}
  Operand(Scalar s) : tensor(nullptr), scalar(s) {}
  template <class T>
    requires std::is_arithmetic_v<T>
  Operand(T v) : tensor(nullptr), scalar(v) {}
  const Tensor* tensor;
  Scalar scalar;
};

/// The dtype op `id` computes in for these operands (NumPy promotion, then the op's Promote).
DType pointwise_dtype(OpId id, std::initializer_list<Operand> operands);
/// Promotes and casts the operands, then applies op `id`.
Tensor pointwise(OpId id, std::initializer_list<Operand> operands);

}  // namespace kiln
