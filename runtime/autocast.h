// runtime/autocast.h -- mixed precision as torch.autocast does it: inside an AutocastGuard,
// matmul, linear, addmm and the convolutions compute in the guard's dtype (bf16 or f16), and
// the ops that need f32's range or precision (sum, prod, mean, var, cumsum, softmax,
// log_softmax, logsumexp, layer_norm and the losses) compute in f32; every other op runs in
// its inputs' dtype. Per thread; guards nest and restore. Backward runs without it (the engine
// turns it off), so gradients come back in each input's dtype.
//
//   {
//     AutocastGuard autocast(bf16);
//     Tensor loss = cross_entropy(model(x), y);  // matmuls in bf16, the loss in f32
//   }
//   loss.backward();                             // f32 parameters get f32 gradients
#pragma once

#include <optional>

#include "runtime/tensor.h"

namespace kiln {

class AutocastGuard {
 public:
  /// dtype: f16 or bf16. enabled = false turns autocast off inside an outer guard.
  explicit AutocastGuard(DType dtype = DType::BF16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

/// The dtype low-precision ops compute in on this thread, or nullopt when autocast is off.
std::optional<DType> autocast_dtype();
/// An operand of a low-precision op: x in the autocast dtype when autocast is on and x is a
/// floating-point tensor, else x itself.
Tensor autocast_low(const Tensor& x);
/// An operand of an op that needs f32: x in f32 when autocast is on and x is f16 or bf16, else
/// x itself.
Tensor autocast_wide(const Tensor& x);

}  // namespace kiln
