// jit/cuda_eager.h -- private to the CUDA backend's generated kernels (jit/cuda_*.cpp): the
// launches they share (cuda_launch.cpp), the eager ops' kernels that jit/cuda_eager.cpp puts
// into the runtime's CUDA op table (cuda_indexed.cpp, cuda_matmul.cpp, cuda_pool.cpp), and the
// device-side copy they use (cuda_eager.cpp). The groups they run are jit/cuda_group.h's.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/cuda/attention.h"
#include "runtime/dims.h"
#include "runtime/op.h"
#include "runtime/tensor.h"

namespace kiln::jit::cuda_eager {

// ---- launches: cuda_launch.cpp ---------------------------------------------------------------

/// Multiprocessors of CUDA device `device` (asked once per device).
int sm_count(int device);
/// Launches `source` (its one argument: the words `args`) with `blocks` blocks of kCudaBlock
/// threads, at most 32 per multiprocessor: the kernels loop over what is left. Dynamic shared
/// memory: `shared_bytes`, or kCudaSharedBytes when negative.
void launch_source(const std::string& source, const std::vector<uint64_t>& args, int64_t blocks, int device,
                   int64_t shared_bytes = -1);
/// Blocks of kCudaBlock threads for `threads` threads.
int64_t blocks_for(int64_t threads);
/// Appends argument words for a hand-written kernel (codegen/cuda's indexed, matmul, pool,
/// random kernels).
void put(std::vector<uint64_t>& w, int64_t v);
void put(std::vector<uint64_t>& w, const void* p);
void put(std::vector<uint64_t>& w, const Dims& d);

// ---- the eager op table's kernels ------------------------------------------------------------

// cuda_eager.cpp: dst = src on one device: broadcast, converted, any strides on either side.
void copy_on_device(const Tensor& src, const Tensor& dst);

// cuda_indexed.cpp: codegen/cuda/indexed.h's kernels.
void pick(const Tensor& x, int64_t dim, const Tensor& idx, Dims idx_st, const Tensor& out, const char* op);
void scatter(const Tensor& x, int64_t dim, const Tensor& idx, const Dims& idx_st, const Tensor& src,
             const Tensor& out, const char* op);
void index_add_sorted(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& src, const Tensor& out);
void arg(OpId id, const Tensor& x, const Attrs& a, const Tensor& out);
void cumsum_rows(const Tensor& x, const Attrs& a, const Tensor& out);
void iota(const Tensor& out);

// cuda_sort.cpp: codegen/cuda/sort.h's kernels (argsort, topk_indices).
void order_rows(const Tensor& x, const Attrs& a, const Tensor& out);

// cuda_matmul.cpp: cuBLAS and cuBLASLt for floats, codegen/cuda/matmul.h for integers.
void matmul(std::span<const Tensor> in, const Tensor& out);
void addmm(OpId id, std::span<const Tensor> in, const Tensor& out);

// cuda_attention.cpp: codegen/cuda/attention.h's kernels (attention, attention_backward).
void attention_op(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out);
/// Whether `k` (its dtype and head dims) runs the tensor-core kernels on `device`: f16 and
/// bf16 on sm_80 and later, where their tiles fit every pass (codegen/cuda/attention_mma.h);
/// KILN_CUDA_ATTENTION_MMA=0 keeps the scalar ones.
bool attention_takes_mma(codegen::CudaAttention k, int device);

// cuda_pool.cpp: codegen/cuda/pool.h's kernels.
void pool(OpId id, const Tensor& x, const Attrs& a, const Tensor& out);
void pool_backward(OpId id, const Tensor& x, const Tensor& grad, const Attrs& a, const Tensor& out);

}  // namespace kiln::jit::cuda_eager
