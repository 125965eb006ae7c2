// codegen/cuda/indexed.h -- the hand-written CUDA kernels of the ops that read or write at
// positions another tensor holds, and of argmax/argmin: CUDA C text per dtype and rank, in the
// same subset as the generated kernels (so the host emulation runs them too), with the CPU's
// semantics (runtime/ops/index.cpp, runtime/ops/reduce.cpp):
// - pick: out[p] = x[p with dim replaced by index(p)] (gather, index_select);
// - scatter: out[q with dim replaced by index(q)] += src[q], one thread per position of the
//   other dims adding its entries in index order, so the sums are the CPU's, bit for bit, on
//   any device (no atomics);
// - arg: the index of the first largest (smallest) value of each row, NaN counting as largest
//   (and smallest), as the CPU's scan finds it;
// - cumsum: along contiguous rows (runtime/ops/scan.cpp); the orderings are sort.h's;
// - iota: 0, 1, ..., n - 1 (runtime/ops/iota.cpp).
// An index out of range is written to a flag the caller reads back (the op then throws).
#pragma once

#include <string>

#include "runtime/dtype.h"

namespace kiln::codegen {

/// Argument structs (64-bit words; R = rank):
///   pick:    size[R] (out's), out_stride[R], x_stride[R] (0 along dim), idx_stride[R], out, x,
///            idx, err, dim_size, x_dim_stride
///   scatter: size[R] (src's), src_stride[R], out_stride[R] (0 along dim), idx_stride[R], out,
///            src, idx, err, dim, out_dim_size, out_dim_stride
///   arg:     rows, cols, x, out (rows of cols contiguous elements; out i64[rows])
/// err points to two int64 on the device, zero before the launch: {1, the bad index} after.
std::string cuda_pick_kernel(DType elem, DType index, int rank);
std::string cuda_scatter_kernel(DType elem, DType index, int rank);
std::string cuda_arg_kernel(DType elem, bool largest);
/// index_add, sorted (its index read once, whatever the columns):
///   index_keys:  n, padded, idx, idx_stride, dim_size, err, keys, pos (i64[padded] each):
///                the index wrapped and checked, padded to a power of two with the largest
///                key, beside each entry's position;
///   bitonic:     padded, j, k, keys, pos: one step of a bitonic sort of (key, position) pairs,
///                whose order is the stable order of the keys;
///   segment_add: size[R] (src's), src_stride[R], out_stride[R], out, src, keys, pos, n, dim,
///                out_dim_stride: a thread per (entry, column) where a run of equal keys
///                starts adds the run to out (already x) in entry order: the CPU's sums, bit
///                for bit, with runs and columns in parallel.
std::string cuda_index_keys_kernel(DType index);
std::string cuda_bitonic_kernel();
std::string cuda_segment_add_kernel(DType elem, int rank);
/// scatter_add, sorted (for few long lines, scatter_add_sorts): every entry's key (its element
/// of out, row-major over out's shape) sorted with bitonic above, then a segmented sum:
///   scatter_keys:    size[R] (src's), idx_stride[R], out_size[R], n, padded, dim, idx, err,
///                    keys, pos: each entry's key, its index wrapped and checked; positions are
///                    entries row-major over src's shape;
///   scatter_segment: size[R], src_stride[R], out_size[R], out_stride[R], out, src, keys, pos,
///                    n: a thread per sorted entry where a run starts adds the run in entry
///                    order: the CPU's sums, bit for bit.
/// Whether scatter_add of `lines` lines of `length` entries along dim sorts on a device of
/// `multiprocessors` (a pure function the tests read): when the lines cannot fill it.
bool scatter_add_sorts(int64_t lines, int64_t length, int multiprocessors);
std::string cuda_scatter_keys_kernel(DType index, int rank);
std::string cuda_scatter_segment_kernel(DType elem, int rank);
/// cumsum:  rows, cols, x, out (contiguous rows; out i64 for integer and bool x, else x's
///          dtype): a thread per row sums in order (f32 for f16 and bf16, wrapping i64 for
///          integers), from the row's end when `reverse`, storing each partial sum, so the
///          bits are the CPU's.
/// iota:    n, out (i64[n]): out[i] = i.
std::string cuda_cumsum_kernel(DType elem, bool reverse);
std::string cuda_iota_kernel();

}  // namespace kiln::codegen
