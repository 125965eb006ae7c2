// codegen/cuda/attention_mma.h -- the tensor-core form of attention's three kernels
// (attention.h), private to codegen/cuda/attention*.cpp. f16, bf16 and f32 q, k and v, head
// dims up to 128, sm_80 on: the products q k^T, P v and the gradients' run on the tensor cores
// through PTX's warp-level matrix instructions (wmma: 16x16x16 tiles of f16 or bf16, two
// 16x16x8 of TF32, f32 accumulation); the softmax and everything elementwise stay in f32
// registers, as in the scalar kernels. f32 operands are split as PyTorch's memory-efficient
// kernel and CUTLASS's 3xTF32 do: x = big + small, both TF32 (10-bit mantissas), and
// a b = big_a big_b + big_a small_b + small_a big_b, the dropped small_a small_b below f32's
// rounding; with `tf32`, big_a big_b alone.
//
// A warp owns 16 rows (queries; keys in the Keys pass), so a block owns 128. The warp's rows
// of its A operands (q and dO, or k and v) are loaded into fragments once; tiles of `rows`
// keys (queries) pass through shared memory. Each product is stored to the warp's f32 buffer,
// where lane pairs own a row each: lane 2r and 2r+1 take row r's halves of the tile, so the
// row's max and sum need one shuffle. The fragments' own layout is PTX's and is never read:
// only wmma.load, wmma.mma and wmma.store touch them, so the host CUDA (which emulates them
// with whole 16x16 tiles per lane) tests the same code a GPU runs. The weights P (and dS)
// are rounded to the input dtype before their product, as flash attention's are (f32: split
// as above).
#pragma once

#include <cstdint>
#include <string>

#include "codegen/cuda/attention.h"

namespace kiln::codegen::attention_mma {

/// Rows per block: 16 per warp.
int block_rows();
/// Keys (queries) per shared tile: 32 or 16, whichever fits kCudaAttentionShared; 0 if none.
int tile_rows(const CudaAttention& k);
int64_t shared_bytes(const CudaAttention& k, int rows);
/// The kernel's text after attention.cpp's helpers and #defines (KA_R, the tile rows, among
/// them): the fragment functions and the pass.
std::string source(const CudaAttention& k);

}  // namespace kiln::codegen::attention_mma
