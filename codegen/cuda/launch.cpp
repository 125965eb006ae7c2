// codegen/cuda/launch.cpp -- the launch of a generated CUDA kernel from its layout, sizes and
// the device's multiprocessor count (the rules are in launch.h).
#include "codegen/cuda/launch.h"

#include <algorithm>
#include <span>

#include "codegen/cuda/emit.h"

namespace kiln::codegen {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The columns a part is cut to (never fewer than half of them): a block's threads load 8
// each, a thread 8 in a row.
constexpr int64_t kBlockChunk = 8 * kCudaBlock;
constexpr int64_t kThreadChunk = 8;
// Rows shorter than this run a thread each (a block's threads would mostly idle).
constexpr int64_t kShortRow = 32;

}  // namespace

CudaRows cuda_rows_by(const KernelLayout& layout, std::span<const int64_t> sizes) {
  int64_t cols = 1;
  for (int d = 0; d < layout.rank; ++d)
    if (layout.reduced >> d & 1) cols *= sizes[static_cast<size_t>(d)];
  int inner = layout.rank - 1;
  bool inner_kept = !(layout.reduced >> inner & 1) && sizes[static_cast<size_t>(inner)] >= kShortRow;
  return inner_kept || cols < kShortRow ? CudaRows::Thread : CudaRows::Block;
}

CudaLaunch plan_cuda_launch(const KernelLayout& layout, std::span<const int64_t> sizes, int sms, CudaWork work) {
  CudaLaunch c;
  c.rows = c.cols = 1;
  for (int d = 0; d < layout.rank; ++d) (layout.reduced >> d & 1 ? c.cols : c.rows) *= sizes[static_cast<size_t>(d)];
  const int64_t most = int64_t{std::max(sms, 1)} * 32;  // the kernels loop over what is left
  if (work == CudaWork::Elements) {
    int64_t total = c.rows * c.cols;
    c.rows = total;
    c.cols = 1;
    c.chunk = 1;
    c.blocks = total == 0 ? 0 : std::clamp<int64_t>(ceil_div(total, kCudaBlock), 1, most);
    return c;
  }
  c.rows_by = cuda_rows_by(layout, sizes);
  c.chunk = c.cols;
  if (c.rows == 0) return c;  // no outputs: nothing to launch (no columns still writes identities)
  const int64_t per_block = c.rows_by == CudaRows::Block ? 1 : kCudaBlock;
  const int64_t want = 2 * int64_t{sms};  // blocks for a full device; aim for twice that
  const int64_t min_chunk = c.rows_by == CudaRows::Block ? kBlockChunk : kThreadChunk;
  // Columns past one chunk may be cut (two parts of a little under a chunk each are still
  // full loads): at 2^20 elements of work, rows x ceil(cols / chunk) parts then fill the device.
  if (work == CudaWork::Partials && ceil_div(c.rows, per_block) < want && c.rows * c.cols >= kSplitWork &&
      c.cols > min_chunk) {
    c.parts = std::min(ceil_div(2 * want * per_block, c.rows), ceil_div(c.cols, min_chunk));
    c.chunk = ceil_div(c.cols, c.parts);
    c.parts = ceil_div(c.cols, c.chunk);  // no empty part
  }
  c.blocks = std::clamp<int64_t>(ceil_div(c.rows * c.parts, per_block), 1, most);
  return c;
}

bool index32_fits(std::span<const int64_t> sizes, std::span<const int64_t> strides, const CudaLaunch& launch) {
  constexpr int64_t kLimit = (int64_t{1} << 31) - 1;
  const size_t rank = sizes.size();
  int64_t total = 1;
  for (int64_t s : sizes) {
    if (s < 0 || s > kLimit) return false;
    total = std::min(total * s, kLimit + 1);  // (each factor below 2^31: no overflow)
  }
  // The loops' indices run up to a few turns of the grid past their counts.
  const int64_t margin = launch.parts * launch.rows + 8 * launch.blocks * kCudaBlock;
  if (total > kLimit - margin) return false;
  for (size_t k = 0; rank > 0 && k < strides.size() / rank; ++k) {
    int64_t extent = launch.parts * launch.rows;  // (a partial result lies part * rows further)
    for (size_t d = 0; d < rank; ++d) {
      const int64_t st = strides[k * rank + d];
      if (sizes[d] > 1 && (st > kLimit || st < -kLimit)) return false;
      extent += (sizes[d] > 0 ? sizes[d] - 1 : 0) * (st < 0 ? -st : st);
      if (extent > kLimit) return false;
    }
  }
  return true;
}

uint64_t cuda_divisor(int64_t d) {
  const uint64_t v = static_cast<uint64_t>(std::max<int64_t>(d, 1));
  uint64_t shift = 0;
  while ((uint64_t{1} << shift) < v) ++shift;
  const uint64_t magic = (uint64_t{1} << 32) * ((uint64_t{1} << shift) - v) / v + 1;
  return magic | shift << 32;
}

}  // namespace kiln::codegen
