// runtime/ops/pointwise.h -- running pointwise ops from the API (promotion, immediates).
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <utility>

#include "runtime/op.h"
#include "runtime/ops/formulas.h"
#include "runtime/type_rules.h"

namespace kiln {

/// A pointwise operand: a tensor, or a number kept as an immediate (never boxed).
struct Operand {
  Operand(const Tensor& t) : tensor(&t) {}
  Operand(Scalar s) : tensor(nullptr), scalar(s) {}
  template <class T>
  requires std::is_arithmetic_v<T> Operand(T v) : tensor(nullptr), scalar(v) {}
  const Tensor* tensor;
  Scalar scalar;
};

/// The CPU kernel of every pointwise op: the strided driver around its vectorized formula.
void pointwise_cpu(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out);

/// A pointwise op's OpDef, all from its block Fm in formulas.h: promotion, dtype kinds, what
/// its derivative reads and the derivative itself, with the shared shape rule and kernel.
template <class Fm> constexpr OpDef pointwise_def() {
  constexpr bool differentiable = Fm::saves != fm::NoDerivative;
  VjpFn vjp = nullptr;
  if constexpr (differentiable) vjp = [](const VjpArgs& a) -> Grads { return Fm::df(a); };
  return OpDef{.promote = static_cast<Promote>(Fm::promote),
               .kinds = Fm::kinds,
               .infer = pointwise_rule,
               .cpu = pointwise_cpu,
               .vjp = vjp,
               .differentiable = differentiable,
               .saves = differentiable ? uint8_t(Fm::saves) : uint8_t{kSaveNothing},
               .linear_in = Fm::linear_in};
}

/// The dtype op `id` computes in for these operands (NumPy promotion, then the op's Promote).
DType pointwise_dtype(OpId id, std::initializer_list<Operand> operands);
/// Promotes and casts the operands, then applies op `id`.
Tensor pointwise(OpId id, std::initializer_list<Operand> operands);
/// Runs op `id` on the CPU straight into `out` (an in-place op: `out` is usually an operand),
/// with pointwise()'s promotion, checks and results bit for bit. `check_result` sees the type
/// pointwise() would return and throws when it cannot be written into `out`. Operands that
/// share memory with `out` in another layout are copied first. No autograd, no recorder.
void pointwise_into(OpId id, std::initializer_list<Operand> operands, const Tensor& out,
                    const std::function<void(const TensorType&)>& check_result);
/// The bounds clamp(x, lo, hi) applies: a missing one is the widest value of its compute dtype.
std::pair<Scalar, Scalar> clamp_bounds(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi);

}  // namespace kiln
