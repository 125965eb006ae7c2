// codegen/cuda/launch.h -- how a kernel of emit_cuda (codegen/cuda/emit.h) is launched: a pure
// function of its loop layout, its sizes and the device's multiprocessor count, so a test
// reads the launch of any group on any device without one.
//
// Kernels without a reduction stride a grid over every element. A reduction's kept indices
// are its rows and its reduced elements its columns; by layout:
// - a reduced innermost dim with long rows (softmax, layer_norm, batch norm's [N, C, H*W] to
//   [C]): a block per row, its threads striding along the row (loads coalesce);
// - a kept innermost dim ([N, C] to [C], the bias gradient), or rows shorter than a warp:
//   a thread per row walking its columns, neighbouring threads reading neighbouring rows;
// - too few rows to fill the device (few long rows, a kept middle dim with few channels, a
//   full reduction): the columns are cut into `parts` chunks of `chunk` elements, each its own
//   row, and the kernel writes partial results [parts, output...] that a second reduction
//   combines over their first dim in a fixed order (the same bits on every run). Work of
//   kFillWork elements or more gets at least two blocks per multiprocessor.
#pragma once

#include <cstdint>
#include <span>

#include "codegen/backend.h"

namespace kiln::codegen {

/// How a reduction kernel maps its rows to threads (part of the kernel's text).
enum class CudaRows : uint8_t {
  Block,   // a block per row; its threads stride over the row's columns
  Thread,  // a thread per row; it walks the row's columns in order
};

struct CudaLaunch {
  CudaRows rows_by = CudaRows::Block;
  int64_t rows = 0, cols = 0;    // kept and reduced elements (no reduction: cols 1)
  int64_t parts = 1, chunk = 0;  // the columns in `parts` chunks of `chunk` (the last shorter)
  int64_t blocks = 0;            // the grid; 0: nothing to launch
  /// Every offset, loop index and coordinate fits in 32 bits (index32_fits): the kernel
  /// indexes in int, and divides by its sizes through multipliers passed with its arguments
  /// (cuda_divisor). 64-bit division is a subroutine of some 70 instructions on a GPU; a
  /// multiplier's is 3.
  bool index32 = false;
};

/// Whether a kernel over `sizes`, whose operands (inputs, then outputs) have `strides` (rank
/// per operand), indexes in 32 bits under `launch`: each operand's furthest element, the
/// partial results' (parts x rows), and the loop count with its last unrolled turn, below 2^31.
bool index32_fits(std::span<const int64_t> sizes, std::span<const int64_t> strides, const CudaLaunch& launch);

/// Division of a non-negative int below 2^31 by `d` >= 1 as a multiply-high, an add and a
/// shift: n / d == (umulhi(n, magic) + n) >> shift (Granlund and Montgomery's round-up method).
/// The kernel's argument word: magic | shift << 32.
uint64_t cuda_divisor(int64_t d);

/// Work (rows x columns) at or past which a launch fills the device with 2 blocks per
/// multiprocessor or more.
inline constexpr int64_t kFillWork = int64_t{1} << 20;

/// Work below which a reduction is not cut into parts: a second launch would cost more.
inline constexpr int64_t kSplitWork = int64_t{1} << 16;

/// What a kernel computes, as far as its launch goes.
enum class CudaWork : uint8_t {
  Elements,  // no reduction
  Rows,      // reductions whose rows must stay whole (a group that reads a reduction's result)
  Partials,  // reductions whose results are the outputs, in a dtype that holds partial
             // results exactly (not f16 or bf16): the columns may be cut into parts
};

/// The launch of a kernel over `layout` and `sizes` on a device of `sms` multiprocessors.
CudaLaunch plan_cuda_launch(const KernelLayout& layout, std::span<const int64_t> sizes, int sms, CudaWork work);

/// How rows map to threads for a reduction over `layout` (what the kernel's text depends on).
CudaRows cuda_rows_by(const KernelLayout& layout, std::span<const int64_t> sizes);

}  // namespace kiln::codegen
