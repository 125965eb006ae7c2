// codegen/cuda/attention.h -- attention and attention_backward on CUDA (runtime/ops/attention.h
// gives their meaning): kernels of kiln's own, flash attention's algorithm in the subset of
// CUDA C the host emulation runs, so CI runs them. Their memory is linear in the sequence: no
// kernel holds more of the L x S weights than one tile of keys per query row.
//
// A warp owns two query rows (key rows in the dk/dv pass; one row in f64); a block's warps
// share tiles of `rows` keys (queries) staged in shared memory in the compute type (f32, or f64
// for f64). Per tile, lane j scores key j of the tile against each of the warp's rows (dot
// products from shared memory, 16 bytes at a time, each piece of key j read once for both
// rows), the warp takes each row's tile max and sum with shuffles, and the lanes then stride
// over the head dim to add the tile's weighted values. The forward keeps the online softmax's
// running max and sum, and with lse stores each row's log-sum-exp; the backward recomputes the
// weights from it. No atomics, so results are the same run to run:
//   Forward:  out = softmax(...) v (and the log-sum-exp).
//   Rows:     per query row, stats[row] = (lse, D) with D = rowsum(dO * out).
//   Queries:  per query row, dq = scale * sum_j dS_ij k_j with dS = P (f dPd - D), from stats.
//   Keys:     per key row, dv = sum_i f P_ij dO_i and dk = scale * sum_i dS_ij q_i, from stats.
//   Backward: the tensor-core form's one kernel for dq, dk and dv (FlashAttention-2's: per
//             key block, dk and dv in registers, dq added per query tile in a fixed order of
//             the key blocks; attention_mma.h), in place of Queries and Keys.
// Per causal score (head dims E = Ev = 64), the tensor-core form multiplies and adds 448 times
// over forward and backward (q k^T and P v; then q k^T, dO v^T, dv, dk, dq); the scalar form,
// whose Queries and Keys passes each compute q k^T and dO v^T, 576.
// The dropout draws each weight's f32 uniform from the Philox stream as rand does (value
// (b * L + i) * S + j), so the mask is the composite's: per tile, the block's threads draw each
// Philox block the tile's weights lie in once and keep all four of its words, as keep flags in
// shared memory (a byte a weight) that the passes read.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/dtype.h"

namespace kiln::codegen {

enum class CudaAttentionPass { Forward, Rows, Queries, Keys, Backward };
enum class CudaAttentionMask { None, Bool, Float };

struct CudaAttention {
  CudaAttentionPass pass = CudaAttentionPass::Forward;
  DType dtype = DType::F32;  // q, k, v, out, grad and the result; a float mask is the compute type
  int64_t e = 0, ev = 0;     // head dims of q and k, and of v (the kernel serves all dims up
                             // to the next power of two of at least 32; they are arguments)
  CudaAttentionMask mask = CudaAttentionMask::None;
  bool causal = false, dropout = false;
  // The tensor-core form (attention_mma.h): f16, bf16 and f32, head dims up to 128, sm_80 on.
  // Where its tiles do not fit, cuda_attention_tile_rows is 0 and the caller takes the scalar
  // form. f32 runs as TF32 split in three terms (f32's accuracy), or with `tf32` plain TF32
  // (cuda::set_allow_tf32, as its matmuls).
  bool mma = false;
  bool tf32 = false;
};

/// Key (query) rows per shared-memory tile: at most 32, as many as fit kCudaAttentionShared
/// bytes; 0 when even one does not (the head dims are too large for these kernels).
int cuda_attention_tile_rows(const CudaAttention& k);
/// The dynamic shared memory a launch needs.
int64_t cuda_attention_shared_bytes(const CudaAttention& k);
inline constexpr int64_t kCudaAttentionShared = 48 * 1024;
/// The tensor-core Backward's: it keeps its 128 keys in shared memory too. Every sm_80 on lets
/// a kernel opt in to this much (sm_86 and sm_89 to 99 KB at most).
inline constexpr int64_t kCudaAttentionBackwardShared = 96 * 1024;
/// Warps per block (each owns a row of the scalar kernels, 16 of the tensor-core ones).
int cuda_attention_warps();
/// Rows (queries; keys in the Keys pass) per block: blocks = batch * ceil(rows / this).
int cuda_attention_block_rows(const CudaAttention& k);

/// Argument struct (64-bit words): batch, l, s, e, ev, q, k, v, out, grad, mask, mask_dims,
/// mask_size[4], mask_stride[4], mask_row_stride, mask_col_stride, state (the device's i64[2]),
/// scale (double bits), drop_scale (double bits), keep_below (double bits), result, stats, lse,
/// lse_grad, dq_acc, sems. q, k, v, out and grad contiguous [batch, rows, dim]; result: out [batch, l, ev]
/// (Forward), the packed gradients [batch, l * e + s * e + s * ev] (Queries writes dq, Keys dk
/// and dv, Backward all three); stats: the compute type's [batch * l, 2]; lse: the packed
/// result's log-sum-exp part (runtime/ops/attention.h; Forward writes it where given, Rows
/// reads it, and lse_grad, the same part of the result's gradient, or null); dq_acc: f32 [batch * l, e]; sems: u32
/// [batch * ceil(l / tile rows)], zeros. Backward's grid is exactly batch * ceil(s / block rows) blocks (no block
/// loops).
std::string cuda_attention_kernel(const CudaAttention& k);

}  // namespace kiln::codegen
