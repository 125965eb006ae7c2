// cuda/indexed.cpp -- the op kernels of codegen/cuda/indexed.h: gather and index_select
// (pick), scatter_add and index_add, argmax and argmin, and cumsum along one dim with iota (the
// orderings are sort.cpp's). The checked index ops report an index out of range through an
// error flag on the device.
#include <algorithm>
#include <vector>

#include "codegen/cuda/indexed.h"
#include "cuda/graph.h"
#include "cuda/launch.h"
#include "cuda/op_kernels.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/cuda_internal.h"
#include "runtime/ops/loops.h"

namespace kiln::cuda {
namespace {

// A checked index op's error flag (i64[2]: zero, or {1, the bad index} after its kernel met an
// index out of range). Eagerly, a slot of the device's deferred checks, read at its next
// synchronizing call (runtime/cuda/checks_cuda.cpp); with cuda::sync_index_checks(), its own,
// read here after the kernel. Under a CUDA graph capture, a slot of the graph's flags, read by
// the plan's next call (cuda/graph.h).
Tensor error_flag(Device d, const char* op, int64_t size) {
  if (CapturedChecks* checks = captured_checks()) return checks->flag(op, size);
  if (!cuda::sync_index_checks()) return cuda::deferred_check_flag(d.index, op, size);
  return zeros({2}, DType::I64, d);
}
void check_flag(const Tensor& flag, const char* op, int64_t size) {
  if (captured_checks() || !cuda::sync_index_checks()) return;
  std::vector<int64_t> f = flag.to(cpu).to_vector<int64_t>();
  KILN_CHECK(f[0] == 0, "{}: index {} is out of range for a dim of size {}", op, f[1], size);
}

// A rank of at least 1: a 0-d tensor is one element of a rank-1 loop.
Dims at_least_1d(const Dims& d, int64_t fill) { return d.empty() ? Dims{fill} : d; }

// The smallest power of two at least n.
int64_t padded_size(int64_t n) {
  int64_t padded = 1;
  while (padded < n) padded *= 2;
  return padded;
}

// Sorts the (key, position) pairs of `keys` and `pos` (i64[padded], padded a power of two) on
// their device: the bitonic network's log2(padded)^2 / 2 compare-exchange steps.
void bitonic_sort(const Tensor& keys, const Tensor& pos) {
  const int64_t padded = keys.numel();
  for (int64_t k = 2; k <= padded; k *= 2)
    for (int64_t j = k / 2; j > 0; j /= 2) {
      std::vector<uint64_t> step;
      for (int64_t v : {padded, j, k}) put(step, v);
      put(step, keys.data_ptr());
      put(step, pos.data_ptr());
      launch_generated(codegen::cuda_bitonic_kernel, std::tuple(), step, blocks_for(padded / 2), keys.device().index);
    }
}

// scatter_add's sorted path (codegen::scatter_add_sorts): out is x already.
void scatter_sorted(int64_t dim, const Tensor& idx, const Dims& idx_st, const Tensor& src, const Tensor& out,
                    const Tensor& flag) {
  const int64_t n = src.numel(), padded = padded_size(n);
  Device d = out.device();
  Tensor keys = Tensor::empty({DType::I64, {padded}, d}), pos = Tensor::empty({DType::I64, {padded}, d});
  std::vector<uint64_t> w;
  put(w, src.shape());
  put(w, idx_st);
  put(w, out.shape());
  for (int64_t v : {n, padded, dim}) put(w, v);
  for (const void* p : {idx.data_ptr(), flag.data_ptr(), keys.data_ptr(), pos.data_ptr()}) put(w, p);
  launch_generated(codegen::cuda_scatter_keys_kernel, std::tuple(idx.dtype(), static_cast<int>(src.dim())), w,
                   blocks_for(padded), d.index);
  bitonic_sort(keys, pos);
  std::vector<uint64_t> a;
  put(a, src.shape());
  put(a, src.strides());
  put(a, out.shape());
  put(a, out.strides());
  for (const void* p : {out.data_ptr(), src.data_ptr(), keys.data_ptr(), pos.data_ptr()}) put(a, p);
  put(a, n);
  launch_generated(codegen::cuda_scatter_segment_kernel, std::tuple(out.dtype(), static_cast<int>(src.dim())), a,
                   blocks_for(n), d.index);
}

// out[p] = x[p with dim replaced by index(p)]: gather and index_select.
void pick(const Tensor& x, int64_t dim, const Tensor& idx, Dims idx_st, const Tensor& out, const char* op) {
  if (out.numel() == 0) return;
  Dims x_st = at_least_1d(x.strides(), 0);
  int64_t dim_size = x.dim() == 0 ? 1 : x.shape()[dim], dim_stride = x.dim() == 0 ? 0 : x.strides()[dim];
  x_st[x.dim() == 0 ? 0 : dim] = 0;
  Dims sizes = at_least_1d(out.shape(), 1);
  Tensor flag = error_flag(out.device(), op, dim_size);
  std::vector<uint64_t> w;
  put(w, sizes);
  put(w, at_least_1d(out.strides(), 1));
  put(w, x_st);
  put(w, at_least_1d(idx_st, 0));
  for (const void* p : {out.data_ptr(), x.data_ptr(), idx.data_ptr(), flag.data_ptr()}) put(w, p);
  put(w, dim_size);
  put(w, dim_stride);
  launch_generated(codegen::cuda_pick_kernel, std::tuple(x.dtype(), idx.dtype(), static_cast<int>(sizes.size())), w,
                   blocks_for(out.numel()), out.device().index);
  check_flag(flag, op, dim_size);
}

// out = x, then src added at index(q) along dim: scatter_add. f16 and bf16 sum in f32 and round
// once, as the CPU's scatter does (runtime/ops/index.cpp). A thread per line walks its entries
// along dim, or, for few long lines, every entry is sorted by its element of out
// (scatter_sorted): the same sums either way.
void scatter(const Tensor& x, int64_t dim, const Tensor& idx, const Dims& idx_st, const Tensor& src, const Tensor& out,
             const char* op) {
  if (is_float(out.dtype()) && dtype_size(out.dtype()) == 2) {
    Tensor acc = Tensor::empty({DType::F32, out.shape(), out.device()});
    Tensor wide = src.to(DType::F32);
    scatter(x.to(DType::F32), dim, idx, idx_st, wide, acc, op);
    copy_on_device(acc, out);
    return;
  }
  copy_on_device(x, out);
  if (src.numel() == 0) return;
  Tensor flag = error_flag(out.device(), op, out.shape()[dim]);
  const int64_t length = src.dim() == 0 ? 1 : src.shape()[dim], lines = src.numel() / std::max<int64_t>(length, 1);
  if (codegen::scatter_add_sorts(lines, length, sm_count(out.device().index))) {
    scatter_sorted(dim, idx, idx_st, src, out, flag);
    check_flag(flag, op, out.shape()[dim]);
    return;
  }
  Dims out_st = out.strides();
  out_st[dim] = 0;
  std::vector<uint64_t> w;
  put(w, src.shape());
  put(w, src.strides());
  put(w, out_st);
  put(w, idx_st);
  for (const void* p : {out.data_ptr(), src.data_ptr(), idx.data_ptr(), flag.data_ptr()}) put(w, p);
  put(w, dim);
  put(w, out.shape()[dim]);
  put(w, out.strides()[dim]);
  launch_generated(codegen::cuda_scatter_kernel, std::tuple(out.dtype(), idx.dtype(), static_cast<int>(src.dim())), w,
                   blocks_for(src.numel() / std::max<int64_t>(src.shape()[dim], 1)), out.device().index);
  check_flag(flag, op, out.shape()[dim]);
}

// index_add: its index sorted once by (index, position), a bitonic sort of log2(n)^2 / 2 steps,
// then a thread per (run of equal indices, column) adding the run in order: the CPU's sums, with
// the work spread over every run and column where scatter's threads walk every index.
void index_add_sorted(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& src, const Tensor& out) {
  if (is_float(out.dtype()) && dtype_size(out.dtype()) == 2) {
    Tensor acc = Tensor::empty({DType::F32, out.shape(), out.device()});
    index_add_sorted(x.to(DType::F32), dim, idx, src.to(DType::F32), acc);
    copy_on_device(acc, out);
    return;
  }
  if (src.dim() == 0)  // one entry: the same as a rank-1 loop of one
    return index_add_sorted(x.reshape({1}), 0, idx.reshape({1}), src.reshape({1}), out.reshape({1}));
  copy_on_device(x, out);
  const int64_t n = idx.numel(), columns = n == 0 ? 0 : src.numel() / n;
  if (n == 0 || columns == 0) return;
  const int64_t padded = padded_size(n);
  Device d = out.device();
  Tensor keys = Tensor::empty({DType::I64, {padded}, d}), pos = Tensor::empty({DType::I64, {padded}, d});
  Tensor flag = error_flag(d, "index_add", out.shape()[dim]);
  std::vector<uint64_t> w;
  put(w, n);
  put(w, padded);
  put(w, idx.data_ptr());
  put(w, idx.dim() == 0 ? int64_t{0} : idx.strides()[0]);
  put(w, out.shape()[dim]);
  for (const void* p : {flag.data_ptr(), keys.data_ptr(), pos.data_ptr()}) put(w, p);
  launch_generated(codegen::cuda_index_keys_kernel, std::tuple(idx.dtype()), w, blocks_for(padded), d.index);
  bitonic_sort(keys, pos);
  std::vector<uint64_t> a;
  put(a, src.shape());
  put(a, src.strides());
  Dims out_st = out.strides();
  out_st[dim] = 0;
  put(a, out_st);
  for (const void* p : {out.data_ptr(), src.data_ptr(), keys.data_ptr(), pos.data_ptr()}) put(a, p);
  put(a, n);
  put(a, dim);
  put(a, out.strides()[dim]);
  launch_generated(codegen::cuda_segment_add_kernel, std::tuple(out.dtype(), static_cast<int>(src.dim())), a,
                   blocks_for(n * columns), d.index);
  check_flag(flag, "index_add", out.shape()[dim]);
}

}  // namespace

void gather(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& idx = in[1];
  Dims st(static_cast<size_t>(idx.dim()), 0);
  for (int64_t d = 0; d < idx.dim(); ++d) st[d] = idx.shape()[d] == 1 ? 0 : idx.strides()[d];
  pick(in[0], a.dim, idx, st, out, "gather");
}

void index_select(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  Dims st(static_cast<size_t>(out.dim()), 0);
  st[a.dim] = in[1].dim() == 0 ? 0 : in[1].strides()[0];
  pick(in[0], a.dim, in[1], st, out, "index_select");
}

void scatter_add(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  scatter(in[0], a.dim, in[1], in[1].strides(), in[2], out, "scatter_add");
}

void index_add(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  index_add_sorted(in[0], a.dim, in[1], in[2], out);
}

// argmax/argmin: the rows the CPU's kernel scans (the reduced dim last, contiguous).
void argmax(OpId id, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  const Tensor& x = in[0];
  Tensor rows = arg_rows(x, a.axes, op_name(id));
  std::vector<uint64_t> w;
  put(w, rows.shape()[0]);
  put(w, rows.shape()[1]);
  put(w, rows.data_ptr());
  put(w, out.data_ptr());
  if (rows.shape()[0] == 0) return;
  launch_generated(codegen::cuda_arg_kernel, std::tuple(rows.dtype(), id == OpId::Argmax), w, rows.shape()[0],
                   out.device().index);
}

// ---- cumsum along one dim: contiguous rows (runtime/ops/scan.cpp) ---------------------------

void cumsum(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  along_dim_rows(in[0], a.dim, out, [&](const Tensor& rows, const Tensor& orows) {
    std::vector<uint64_t> w;
    put(w, rows.shape()[0]);
    put(w, rows.shape()[1]);
    put(w, rows.data_ptr());
    put(w, orows.data_ptr());
    launch_generated(codegen::cuda_cumsum_kernel, std::tuple(rows.dtype(), a.reverse), w, blocks_for(rows.shape()[0]),
                     out.device().index);
  });
}

void iota(const Tensor& out) {
  if (out.numel() == 0) return;
  std::vector<uint64_t> w;
  put(w, out.numel());
  put(w, out.data_ptr());
  launch_generated(codegen::cuda_iota_kernel, std::tuple(), w, blocks_for(out.numel()), out.device().index);
}

void iota(OpId, std::span<const Tensor>, const Attrs&, const Tensor& out) { iota(out); }

}  // namespace kiln::cuda
