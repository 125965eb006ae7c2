// cuda/libraries.h -- the CUDA libraries' calls that compute, behind std types (no CUDA
// header): cuBLAS's GEMM (blas_cuda.cpp), cuBLASLt's GEMM with an epilogue (blaslt_cuda.cpp),
// cuDNN's RNN stacks (rnn_cuda.cpp) and convolutions' batch chunking (conv_cuda.cpp). Each
// library is loaded with dlopen on first use; without the CUDA toolkit at configure time,
// cuda/unavailable.cpp says why.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dims.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace kiln::cuda {

/// cuBLAS (loaded with dlopen: KILN_CUDA_CUBLAS, else libcublas of CUDA 13 or 12), in its
/// column-major terms: C = op(A) op(B), m x n, over `batch` matrices `stride_*` elements apart,
/// queued on the current stream of `device`. f32 (with TF32 when cuda::allow_tf32()), f64,
/// and f16 and bf16 computing in f32. Throws kiln::Error when cuBLAS is unavailable.
void gemm(int device, DType dtype, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const void* a,
          int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* c, int64_t ldc,
          int64_t stride_c, int64_t batch);

/// What cuBLASLt adds to a GEMM before its one rounding: a bias per row of the (column-major)
/// result, then a relu or the tanh approximation of gelu.
enum class Epilogue { Bias, ReluBias, GeluBias };
/// cuBLASLt (loaded with dlopen: KILN_CUDA_CUBLASLT, else libcublasLt of CUDA 13 or 12), in
/// cuBLAS's column-major terms: C = epilogue(op(A) op(B) + bias), m x n, bias of m values,
/// queued on the current stream of `device`. Returns false with `*why`, having queued nothing,
/// when cuBLASLt is unavailable or has no algorithm for the case: the caller computes it
/// another way. Dtypes as gemm().
bool gemm_epilogue(int device, DType dtype, Epilogue epilogue, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                   int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, const void* bias, void* c,
                   int64_t ldc, std::string* why);
/// Calls of gemm_epilogue that cuBLASLt ran, and that it declined.
struct EpilogueStats {
  int64_t fused = 0, declined = 0;
};
EpilogueStats epilogue_stats();

/// A stack of recurrent layers as cuDNN's RNN API runs it (cuda/rnn_cuda.cpp): an
/// LSTM or a GRU, with torch's gate orders (which are cuDNN's: i, f, g, o and r, z, n) and
/// equations (a GRU's recurrent bias inside r's product), num_layers deep, one or two
/// directions, two biases per layer and direction or none, no dropout between the layers.
struct RnnSpec {
  bool lstm = true;  // else a GRU
  int64_t input_size = 0, hidden_size = 0, num_layers = 1;
  bool bidirectional = false, bias = true;
  DType dtype = DType::F32;
};
/// A forward's results: y [T, N, D * H], the final h (and c) [L * D, N, H]; with what its
/// backward reads (the packed weights, the sequence lengths, cuDNN's reserve).
struct RnnForward {
  Tensor y, hy, cy;
  Tensor weights, lengths, reserve;
};
/// Runs `spec` on x [T, N, input_size] from hx and cx [L * D, N, H] (undefined: zeros; all
/// contiguous, of spec's dtype, on one device) with `params` per layer and direction in torch's
/// order (w_ih, w_hh, then b_ih, b_hh with bias), packed into cuDNN's weight space.
/// `training` keeps the reserve for rnn_backward. nullopt with `*why`, having queued nothing,
/// when cuDNN is unavailable or does not support the configuration.
std::optional<RnnForward> rnn_forward(const RnnSpec& spec, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                      std::span<const Tensor> params, bool training, std::string* why);
/// The gradients of rnn_forward's inputs from those of its results (undefined: zeros): dx, dhx
/// and dcx (undefined where hx, cx were), and with `weights` each param's, in `params`' order.
struct RnnGrads {
  Tensor dx, dhx, dcx;
  std::vector<Tensor> dparams;
};
RnnGrads rnn_backward(const RnnSpec& spec, const Tensor& x, const Tensor& hx, const Tensor& cx, const RnnForward& fwd,
                      const Tensor& dy, const Tensor& dhy, const Tensor& dcy, bool weights);

/// Drops every convolution's cached cuDNN algorithm (tests that change what the host cuDNN
/// offers between calls of the same key).
void forget_conv_algorithms();

/// cuDNN's legacy convolution calls index with int: a convolution whose x or y reaches
/// dnn_element_limit() (2^31 - 1) elements runs on batch chunks below it, the weight gradient
/// summed over them (PyTorch splits so too). Tests lower the limit (0: back to the default).
int64_t dnn_element_limit();
void set_dnn_element_limit(int64_t limit);
/// The most samples of a batch whose elements, and furthest element, stay below `limit` in
/// every tensor with that batch (shape and strides, dim 0 the batch); 0 when one does not fit.
int64_t dnn_batch_chunk(const std::vector<std::pair<Dims, Dims>>& tensors, int64_t limit);

}  // namespace kiln::cuda
