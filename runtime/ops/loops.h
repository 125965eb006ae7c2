// runtime/ops/loops.h -- walking several strided operands over one shape, and dtype conversion.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "runtime/tensor.h"

namespace kiln {

inline constexpr int kMaxOperands = 4;

/// Operands of an elementwise walk: base addresses and byte strides over a common shape.
/// Operand 0 is conventionally the output.
struct StridedOperands {
  int count = 0;
  char* base[kMaxOperands] = {};
  Dims strides[kMaxOperands];  // bytes, one per dim of the shape (0 where broadcast)
};

/// fn(ptrs, inner_strides, n): one row of the innermost (coalesced) dim; ptrs[k] is operand
/// k's first element of the row, inner_strides[k] its byte stride along the row.
using RowFn = void (*)(void* ctx, char* const* ptrs, const int64_t* inner_strides, int64_t n);

/// Calls fn on every row of `shape`, after merging dims that are contiguous for all operands;
/// splits rows across threads when the total work exceeds `grain` elements.
void for_each_row(const Dims& shape, const StridedOperands& ops, int64_t grain, RowFn fn, void* ctx);

/// Byte strides of tensor `t` broadcast to `shape` (0 on broadcast and size-1 dims).
Dims broadcast_byte_strides(const Tensor& t, const Dims& shape);

/// dst[i * dst_stride] = (dst dtype) src[i * src_stride] for i < n (strides in bytes).
void convert(const char* src, int64_t src_stride, DType src_type, char* dst, int64_t dst_stride, DType dst_type,
             int64_t n);

/// Copies (and converts) `src` into `dst`, broadcasting src to dst's shape. Safe when src
/// shares memory with dst (it is read first); throws when dst has internal overlap.
void copy_into(const Tensor& src, const Tensor& dst);

/// The cat and pad kernels, made only of views and copies through the devices' backends
/// (copy_between), so every device runs them as the CPU does: out (fresh, x's device) holds
/// the inputs one after another along dim; or x padded with `value` (negative pads crop).
void cat_into(std::span<const Tensor> in, int64_t dim, const Tensor& out);
void pad_into(const Tensor& x, const Dims& pads, Scalar value, const Tensor& out);

/// Calls fill(rows, out_rows) with x's elements as contiguous rows along `dim` ([m, n]) and a
/// contiguous [m, k] for out (x's shape with k at dim; a 0-d tensor is one row of one), then
/// puts out_rows into out: the scans and orderings (runtime/ops/scan.cpp) on any device.
void along_dim_rows(const Tensor& x, int64_t dim, const Tensor& out,
                    const std::function<void(const Tensor&, const Tensor&)>& fill);

/// argmax's and argmin's rows over `axes` (one dim, or none: the flattened tensor): x's
/// elements as a contiguous [m, n] with the reduced dim last and the others in order, so the
/// rows follow the output's layout; every device's kernel scans them (runtime/ops/reduce.cpp).
Tensor arg_rows(const Tensor& x, const Dims& axes, const char* op);

/// Whether a write into `t` would store several elements into one place: a dim of size > 1
/// with stride 0, as expand() makes.
bool has_internal_overlap(const Tensor& t);
/// Throws a kiln::Error naming `op` when `t` has internal overlap.
void check_no_internal_overlap(const Tensor& t, const char* op);
/// Whether the memory spans of `a` and `b` intersect (so they may share elements).
bool may_overlap(const Tensor& a, const Tensor& b);
/// `x`, to be read by an elementwise write into `out` (broadcast to out's shape): x itself
/// when that is safe (no shared memory, or exactly out's elements in out's layout), else a
/// contiguous copy of it.
Tensor readable_while_writing(const Tensor& x, const Tensor& out);

/// Sets `bytes` bytes at p to zero, on every thread for large buffers. Past 16 MB it
/// writes around the caches (non-temporal stores): the memory is not read first, and what is
/// being cleared is larger than the caches anyway.
void zero_bytes(void* p, int64_t bytes);

/// Work (elements) below which an elementwise op stays on one thread.
inline constexpr int64_t kParallelGrain = 1 << 16;

}  // namespace kiln
