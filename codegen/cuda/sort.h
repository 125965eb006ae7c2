// codegen/cuda/sort.h -- the CUDA kernels of the orderings along contiguous rows (argsort and
// topk_indices, runtime/ops/scan.cpp): CUDA C text, in the subset the host emulation runs too,
// with the CPU's order bit for bit: ascending or descending, NaN above every number (last
// ascending, first descending), -0 equal to 0, equal elements in index order.
//
// Short rows (order_ranks) take one launch: a thread per element counts what goes before it.
// Longer rows are sorted by a stable least-significant-digit radix sort of each row, four bits a
// pass, of the element's order key (its bits made to compare as unsigned integers: sign flipped,
// negatives inverted, NaN the largest, -0 made 0, inverted again descending). A pass counts
// each tile's digits, scans them per row, and moves positions to their digit's place, in order
// within a digit; rows never mix, so no pass sorts by row. topk with a small k first finds each
// row's k-th key by radix select (eight bits a pass), then stably partitions the row into
// below / equal / above it, whose first k positions are topk's set in index order, and sorts
// only those.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/dtype.h"

namespace kiln::codegen {

/// Whether rows of `cols` elements take the rank-counting kernel (O(cols^2) work a row, one
/// launch) rather than the radix sort.
bool order_ranks(int64_t cols);
/// Bits of the order key of `elem` (a multiple of eight), so 4-bit passes: key_bits / 4.
int order_key_bits(DType elem);
/// Items a thread takes in a radix pass over segments of `seg_len`: 1, 2, 4 or 8, the fewest
/// whose tile (kCudaBlock of them) holds a segment; a tile is kCudaBlock * items positions.
int radix_items(int64_t seg_len);
/// Dynamic shared memory of the radix count and scatter kernels.
int64_t radix_shared_bytes();
/// Whether topk of k over rows of `cols` selects the k-th key before sorting, rather than
/// sorting whole rows and keeping the first k.
bool topk_selects(int64_t cols, int64_t k);

/// Each kernel is one text per dtype; the direction (`descending`, 0 or 1) is an argument.
/// order:   rows, cols, k, x, out, descending (out i64[rows, k]): a thread per element counts
///          the elements that go before it in the stable order and writes its index at that
///          rank when the rank is below k.
std::string cuda_order_kernel(DType elem);

/// The radix passes' argument struct (64-bit words):
///   segs, seg_len, tiles, x, in, out, counts, shift, kth, items, descending
/// Segment s holds positions in[s * seg_len + i] (flat indices into x); its tiles are
/// tiles = ceil(seg_len / tile) runs of one tile (items = radix_items(seg_len)). counts:
/// i64[segs][16][tiles]. The digit of a position is (key >> shift) & 15, or, where kth is not
/// null, 0, 1 or 2 as its key is below, equal to or above kth[2 * s] (radix select's state
/// below): a stable partition.
///   count:   counts[s][d][t] = the positions of tile t of segment s with digit d;
///   scan:    counts made exclusive sums per segment, in (digit, tile) order: each tile's first
///            place for each digit;
///   scatter: out[s * seg_len + place] = in[...], in order within a digit: one stable pass.
std::string cuda_radix_count_kernel(DType elem);
std::string cuda_radix_scan_kernel();
std::string cuda_radix_scatter_kernel(DType elem);

/// Radix select, eight bits a pass from the top (x contiguous rows; hist u64[segs][256], zero
/// before the first pass; state u64[segs][2]: the key prefix found so far and the rank still
/// sought within it, zero before the first pass):
///   histogram: segs, seg_len, x, hist, state, shift, descending: hist[s][d] = the elements of row s whose
///              key agrees with the prefix above shift + 8 and has digit d at shift;
///   select:    segs, k, hist, state, shift, first: a thread per row finds the digit holding
///              rank k (first pass: k itself), adds it to the prefix and zeroes hist.
/// After the last pass (shift 0) state[s][0] is row s's k-th key.
std::string cuda_radix_histogram_kernel(DType elem);
std::string cuda_radix_select_kernel();

/// finish: segs, seg_len, k, sub, in, out: out[s * k + i] = in[s * seg_len + i] - s * sub for
/// i < k: the first k of each sorted segment, as flat positions (sub 0) or positions in the row
/// (sub = cols).
std::string cuda_radix_finish_kernel();

}  // namespace kiln::codegen
