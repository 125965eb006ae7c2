// runtime/ops/rnn.h -- what every kernel of the rnn ops reads (the composite's, registered by
// nn/recurrent_op.cpp, and cuDNN's, cuda/rnn.cpp): the operands by role, the type rule, and
// how the results are packed.
//
//   rnn(x [T, N, in], [h0 [L*D, N, H] [, c0]], params...)  -> [N, T*D*H + kinds*L*D*H]: per batch
//                                                             row, its y, h_n (, c_n)
//   rnn_backward(x, [h0 [, c0]], params..., out, grad)     -> the gradients of x, the states
//                                                             given and each param, packed
//
// Params per layer and direction are torch's w_ih, w_hh (, b_ih, b_hh); the states are given
// (3-d) or not (zeros). Attributes: lstm, hidden_size, num_layers, bidirectional. f32 and f64.
// rnn's result is batch-major so that its parts are cut along a dim that does not grow with
// the batch: a module saved with a dynamic batch dim keeps it (jit/save.cpp).
//
// The ops' meaning is the unrolled stack of nn/recurrent.cpp, a layer above the runtime, so
// their OpDefs are registered from there (register_op_def) when the library loads.
#pragma once

#include <span>
#include <vector>

#include "runtime/op.h"

namespace kiln::rnn_op {

/// The operands of rnn or rnn_backward by role (their rule checked them).
struct Operands {
  Tensor x;
  std::vector<Tensor> states, params;
  Tensor out, grad;  // rnn_backward's
};
Operands operands_of(OpId id, std::span<const Tensor> in, const Attrs& a);

/// Directions: 2 when bidirectional.
inline int64_t dirs(const Attrs& a) { return a.bidirectional ? 2 : 1; }
/// Whether the params hold the biases (four per layer and direction, not two).
bool has_bias(const Operands& o, const Attrs& a);

/// The shape and dtype rule of both ops.
TensorType rnn_rule(OpId id, std::span<const Tensor> in, const Attrs& a);

/// The results rnn packs: y [T, N, D * H], then h_n (and c_n) [L * D, N, H].
std::vector<Dims> result_shapes(const Tensor& x, const Attrs& a);
/// rnn's results [T or L*D, N, ...] packed batch-major: [N, the rest of each, in order].
Tensor pack_rows(const std::vector<Tensor>& parts);
/// rnn's results out of its packed [N, ...] value, shaped (views where they can be).
std::vector<Tensor> unpack_rows(const Tensor& packed, std::span<const Dims> shapes);
/// The tensors flattened and packed, as rnn_backward gives them.
Tensor pack(const std::vector<Tensor>& parts);
/// out = result, untaped (a kernel's last step).
void write(const Tensor& result, const Tensor& out);

}  // namespace kiln::rnn_op
