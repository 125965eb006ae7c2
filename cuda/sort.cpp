// cuda/sort.cpp -- argsort and topk_indices on CUDA (codegen/cuda/sort.h): short rows
// ranked by counting in one launch; longer rows radix-sorted, four bits a pass, each row on its
// own; topk with a small k selects each row's k-th key first and sorts only the k it keeps.
// O(n) work a pass, with passes fixed by the dtype's width: O(n) a row where the O(n log n)
// comparison sorts give the same order.
#include <utility>
#include <vector>

#include "codegen/cuda/emit.h"
#include "codegen/cuda/sort.h"
#include "cuda/launch.h"
#include "cuda/op_kernels.h"
#include "runtime/api.h"
#include "runtime/ops/loops.h"

namespace kiln::cuda {
namespace {

// The rows being ordered: x's contiguous [rows, cols] elements and what their keys are.
struct Rows {
  const Tensor& x;
  bool descending;
  int64_t rows() const { return x.shape()[0]; }
  int64_t cols() const { return x.shape()[1]; }
  int device() const { return x.device().index; }
};

// Sorts each of `segs` segments of `seg_len` positions of x (flat indices, in `pos`) stably by
// their keys, or, given select's `state`, partitions them stably into below / equal to / above
// each row's k-th key. Passes alternate between pos and a buffer of its size; the result is in
// whichever the last pass wrote, which is returned.
Tensor radix_passes(const Rows& r, Tensor pos, int64_t segs, int64_t seg_len, const Tensor* state) {
  Tensor spare = empty({pos.numel()}, DType::I64, pos.device());
  const int items = codegen::radix_items(seg_len);
  const int64_t tile = int64_t{codegen::kCudaBlock} * items, tiles = (seg_len + tile - 1) / tile;
  const bool partition = state != nullptr;
  Tensor counts = empty({segs * 16 * tiles}, DType::I64, r.x.device());
  const int64_t shared = codegen::radix_shared_bytes();
  const int bits = partition ? 4 : codegen::order_key_bits(r.x.dtype());
  for (int shift = 0; shift < bits; shift += 4) {
    std::vector<uint64_t> w;
    for (int64_t v : {segs, seg_len, tiles}) put(w, v);
    for (const void* p : {r.x.data_ptr(), pos.data_ptr(), spare.data_ptr(), counts.data_ptr()}) put(w, p);
    put(w, int64_t{shift});
    put(w, partition ? state->data_ptr() : nullptr);
    put(w, int64_t{items});
    put(w, int64_t{r.descending});
    launch_generated(codegen::cuda_radix_count_kernel, std::tuple(r.x.dtype()), w, segs * tiles, r.device(), shared);
    launch_generated(codegen::cuda_radix_scan_kernel, std::tuple(), w, segs, r.device(), shared);
    launch_generated(codegen::cuda_radix_scatter_kernel, std::tuple(r.x.dtype()), w, segs * tiles, r.device(), shared);
    std::swap(pos, spare);
  }
  return pos;
}

// out[s, i] = pos[s * seg_len + i] - s * sub for i < k.
void finish(const Tensor& pos, int64_t segs, int64_t seg_len, int64_t k, int64_t sub, const Tensor& out) {
  std::vector<uint64_t> w;
  for (int64_t v : {segs, seg_len, k, sub}) put(w, v);
  put(w, pos.data_ptr());
  put(w, out.data_ptr());
  launch_generated(codegen::cuda_radix_finish_kernel, std::tuple(), w, blocks_for(segs * k), out.device().index);
}

// Each row's k-th key (from the top, eight bits a pass): select's state, u64[rows][2].
Tensor select_kth(const Rows& r, int64_t k) {
  const Device d = r.x.device();
  Tensor hist = zeros({r.rows() * 256}, DType::I64, d), state = zeros({r.rows() * 2}, DType::I64, d);
  const int64_t chunks = (r.cols() + 8 * codegen::kCudaBlock - 1) / (8 * codegen::kCudaBlock);
  const int bits = codegen::order_key_bits(r.x.dtype());
  for (int shift = bits - 8; shift >= 0; shift -= 8) {
    std::vector<uint64_t> h;
    for (int64_t v : {r.rows(), r.cols()}) put(h, v);
    for (const void* p : {r.x.data_ptr(), hist.data_ptr(), state.data_ptr()}) put(h, p);
    put(h, int64_t{shift});
    put(h, int64_t{r.descending});
    launch_generated(codegen::cuda_radix_histogram_kernel, std::tuple(r.x.dtype()), h, r.rows() * chunks, r.device(),
                     int64_t{codegen::kCudaBlock} * 4);
    std::vector<uint64_t> s;
    for (int64_t v : {r.rows(), k}) put(s, v);
    for (const void* p : {hist.data_ptr(), state.data_ptr()}) put(s, p);
    put(s, int64_t{shift});
    put(s, int64_t{shift == bits - 8});
    launch_generated(codegen::cuda_radix_select_kernel, std::tuple(), s, blocks_for(r.rows()), r.device());
  }
  return state;
}

void ranked(const Rows& r, const Tensor& out) {
  std::vector<uint64_t> w;
  for (int64_t v : {r.rows(), r.cols(), out.shape()[1]}) put(w, v);
  put(w, r.x.data_ptr());
  put(w, out.data_ptr());
  put(w, int64_t{r.descending});
  launch_generated(codegen::cuda_order_kernel, std::tuple(r.x.dtype()), w, blocks_for(r.x.numel()), r.device());
}

}  // namespace

void order(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  along_dim_rows(in[0], a.dim, out, [&](const Tensor& xrows, const Tensor& orows) {
    const Rows r{xrows, a.descending};
    const int64_t m = r.rows(), n = r.cols(), k = orows.shape()[1];
    if (m == 0 || k == 0) return;
    if (codegen::order_ranks(n)) return ranked(r, orows);
    const Device d = xrows.device();
    Tensor pos = empty({m * n}, DType::I64, d);
    iota(pos);
    if (!codegen::topk_selects(n, k)) {
      finish(radix_passes(r, pos, m, n, nullptr), m, n, k, n, orows);
      return;
    }
    // The k-th key of each row, then the row split stably around it: its first k positions are
    // topk's k, in index order, sorted as a segment of their own.
    Tensor state = select_kth(r, k);
    Tensor parted = radix_passes(r, pos, m, n, &state);
    Tensor kept = empty({m * k}, DType::I64, d);
    finish(parted, m, n, k, 0, kept);
    finish(radix_passes(r, kept, m, k, nullptr), m, k, k, n, orows);
  });
}

}  // namespace kiln::cuda
