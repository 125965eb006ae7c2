// nn/recurrent_cudnn.h -- LSTM and GRU stacks on CUDA through cuDNN's RNN API: eagerly as one
// autograd node (nn/recurrent_cudnn.cpp), in a trace as one rnn op (nn/recurrent_op.cpp);
// internal to nn/recurrent*.cpp. The unrolled composite (nn/recurrent.cpp) stays the
// reference and the CPU's path, and runs where cuDNN does not.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::nn::detail {

/// The layers of an LSTM (else a GRU) that run together, with no dropout between them.
struct RnnStack {
  bool lstm = true;
  int64_t input_size = 0, hidden_size = 0, num_layers = 1;
  bool bidirectional = false, bias = true;
};

/// The stack run op by op: (x [T, N, in], states [L * D, N, H] per kind or none, params per
/// layer and direction: w_ih, w_hh (, b_ih, b_hh)) -> {y, h, (c)}.
using RnnComposite =
    std::function<std::vector<Tensor>(const Tensor&, std::span<const Tensor>, std::span<const Tensor>)>;

/// The stack op by op from x [T, N, in]: {y [T, N, D * H], h_n [L * D, N, H] (, c_n)}. `states`
/// per kind [L * D, N, H] (none: zeros); dropout p between layers (nn/recurrent.cpp). The
/// reference, the CPU's path and the meaning of the rnn op.
std::vector<Tensor> unrolled(const RnnStack& st, const Tensor& x, std::span<const Tensor> states,
                             std::span<const Tensor> params, double p, bool training);

/// Whether a trace is recording a stack on CUDA tensors: it records an rnn op (rnn_op_stack).
bool traced_on_cuda(const Tensor& x, std::span<const Tensor> states, std::span<const Tensor> params);
/// {y, h, (c)} of the stack as one rnn op (nn/recurrent_op.cpp), under autocast in its dtype;
/// the composite where the op does not take the operands' dtype.
std::vector<Tensor> rnn_op_stack(const RnnStack& stack, const Tensor& x, std::span<const Tensor> states,
                                 std::span<const Tensor> params);

/// Whether cuDNN may run a stack on these tensors: CUDA, eager (no trace records, composites
/// not held op by op by CompositeFusionOff or KILN_FUSION=0), nothing empty.
bool cudnn_may_run(const Tensor& x, std::span<const Tensor> states, std::span<const Tensor> params);

/// {y, h, (c)} of the stack, through cuDNN when it supports the configuration (under autocast
/// in its dtype), else through `composite`. Differentiable once through cuDNN's backward; a
/// backward with create_graph runs `composite` again and differentiates that.
std::vector<Tensor> cudnn_stack(const RnnStack& stack, const Tensor& x, std::span<const Tensor> states,
                                std::span<const Tensor> params, const RnnComposite& composite);

}  // namespace kiln::nn::detail
