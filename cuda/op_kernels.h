// cuda/op_kernels.h -- private to the CUDA layer: the kernels of cuda/op_table.cpp's table, by
// the file that holds them. Each runs op `id` on `in` into `out` (fresh, contiguous), queued on
// the current stream: runtime/cuda_internal.h's OpKernel. Eager calls and compiled plans run
// them alike (a plan's ops outside fused groups run through apply()). Fused groups are
// cuda/group.h's; launches cuda/launch.h's.
#pragma once

#include <span>

#include "codegen/cuda/attention.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::cuda {

// single_op.cpp: pointwise ops, casts and the fusible reductions as groups of one op; the
// device-side copy and the movement built on it; rand and randn.
void single_op(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void copy(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void cat(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void pad(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void draw(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
/// dst = src on one device: broadcast, converted, any strides on either side (the backend's
/// CopyKernel).
void copy_on_device(const Tensor& src, const Tensor& dst);

// indexed.cpp: codegen/cuda/indexed.h's kernels.
void gather(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void index_select(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void scatter_add(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void index_add(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void argmax(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);  // and argmin
void cumsum(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void iota(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
/// 0, 1, ... into the i64 tensor `out` (sort.cpp's positions too).
void iota(const Tensor& out);

// sort.cpp: codegen/cuda/sort.h's kernels (argsort, topk_indices).
void order(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);

// matmul.cpp: cuBLAS and cuBLASLt for floats, codegen/cuda/matmul.h for integers.
void matmul(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void addmm(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);  // and its activations

// attention.cpp: codegen/cuda/attention.h's kernels (attention, attention_backward).
void attention_op(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
/// Whether `k` (its dtype and head dims) runs the tensor-core kernels on `device`: f16 and
/// bf16 on sm_80 and later, where their tiles fit every pass (codegen/cuda/attention_mma.h);
/// KILN_CUDA_ATTENTION_MMA=0 keeps the scalar ones.
bool attention_takes_mma(codegen::CudaAttention k, int device);

// pool.cpp: codegen/cuda/pool.h's kernels.
void pool(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void pool_backward(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);

// conv_cuda.cpp: cuDNN's convolutions.
void conv2d(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void conv2d_input_grad(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
void conv2d_weight_grad(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);

// rnn.cpp: cuDNN's LSTM and GRU stacks (rnn, rnn_backward).
void rnn(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);

}  // namespace kiln::cuda
