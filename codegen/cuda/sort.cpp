// codegen/cuda/sort.cpp -- CUDA C of the orderings along rows: rank counting for short rows,
// a stable radix sort per row, and radix select for topk; see sort.h.
#include "codegen/cuda/sort.h"

#include <fmt/format.h>

#include "codegen/cuda/emit.h"
#include "runtime/check.h"

namespace kiln::codegen {
namespace {

// Rows up to this many elements are ranked by counting: cols^2 compares a row, in one launch,
// cheaper than a radix sort's passes (three launches each) until rows are long.
constexpr int64_t kRankedColumns = 64;

// kiln_order_key(x, p): the order key of element p of x, an unsigned integer whose order is
// the stable sort's (the CPU's goes_before in runtime/ops/scan.cpp), position aside.
std::string order_key_function(DType elem) {
  const int bits = order_key_bits(elem);
  const std::string all = bits == 64 ? "0xffffffffffffffffull" : fmt::format("0x{:x}ull", (1ull << bits) - 1);
  const std::string sign = fmt::format("0x{:x}ull", 1ull << (bits - 1));
  std::string body;
  if (is_float(elem)) {
    unsigned long long exponent = 0, mantissa = 0;
    switch (elem) {
      case DType::F32: exponent = 0x7f800000ull, mantissa = 0x7fffffull; break;
      case DType::F64: exponent = 0x7ff0000000000000ull, mantissa = 0xfffffffffffffull; break;
      case DType::F16: exponent = 0x7c00ull, mantissa = 0x3ffull; break;
      default: exponent = 0x7f80ull, mantissa = 0x7full; break;  // bf16
    }
    // NaN above +inf; -0 is 0; negatives inverted below the positives, which gain the sign bit.
    body = fmt::format(R"(
  if ((b & 0x{0:x}ull) == 0x{0:x}ull && (b & 0x{1:x}ull) != 0) b = {2};
  else {{
    if (b == {3}) b = 0;
    b = (b & {3}) ? (~b & {2}) : (b | {3});
  }})",
                       exponent, mantissa, all, sign);
  } else if (elem == DType::I32 || elem == DType::I64) {
    body = fmt::format("\n  b ^= {};", sign);
  }
  return fmt::format(R"(
__device__ __forceinline__ unsigned long long kiln_order_key(const void* x, long long p, long long descending) {{
  unsigned long long b = ((const {0}*)x)[p];{1}
  return descending ? ~b & {2} : b;
}}
)",
                     cuda_bits_type(elem), body, all);
}

// The radix passes' arguments and a position's digit (see sort.h).
std::string radix_pass_head(DType elem) {
  return cuda_prelude() + order_key_function(elem) + R"(
struct Args {
  long long segs, seg_len, tiles;
  const void* x; const long long* in; long long* out; long long* counts;
  long long shift; const unsigned long long* kth; long long items, descending;
};

__device__ __forceinline__ unsigned kiln_digit(const Args& a, long long s, long long p) {
  const unsigned long long key = kiln_order_key(a.x, p, a.descending);
  if (!a.kth) return (unsigned)(key >> a.shift) & 15u;
  const unsigned long long kth = a.kth[2 * s];
  return key < kth ? 0u : key == kth ? 1u : 2u;
}
)";
}

// Both per-tile kernels start alike: thread t takes positions [t * items, (t + 1) * items) of
// the tile (items at most 8: the arrays stay in registers), and the shared table
// cnt[d * block + t] counts its positions of digit d.
const char* kTileLoop = R"(
  const long long tile_size = (long long)blockDim.x * a.items;
  unsigned* cnt = kiln_shared<unsigned>();
  for (long long g = blockIdx.x; g < a.segs * a.tiles; g += gridDim.x) {
    const long long s = g / a.tiles, tile = g % a.tiles, seg = s * a.seg_len;
    const long long first = tile * tile_size + (long long)threadIdx.x * a.items;
    long long pos[8];
    unsigned dig[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const long long i = first + j;
      dig[j] = 16u;  // past the thread's items or the segment: no digit
      if (j < a.items && i < a.seg_len) { pos[j] = a.in[seg + i]; dig[j] = kiln_digit(a, s, pos[j]); }
    }
    for (unsigned d = 0; d < 16u; ++d) {
      unsigned c = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) c += dig[j] == d;
      cnt[d * blockDim.x + threadIdx.x] = c;
    }
    __syncthreads();)";

}  // namespace

bool order_ranks(int64_t cols) { return cols <= kRankedColumns; }

int order_key_bits(DType elem) { return static_cast<int>(dtype_size(elem)) * 8; }

int radix_items(int64_t seg_len) {
  int items = 1;
  while (items < 8 && int64_t{kCudaBlock} * items < seg_len) items *= 2;
  return items;
}

int64_t radix_shared_bytes() { return (16 * kCudaBlock + kCudaBlock) * 4; }

bool topk_selects(int64_t cols, int64_t k) { return !order_ranks(cols) && k * 8 <= cols; }

std::string cuda_order_kernel(DType elem) {
  return cuda_prelude() + order_key_function(elem) +
         fmt::format(R"(
struct Args {{
  long long rows, cols, k;
  const void* x; long long* out; long long descending;
}};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  long long total = a.rows * a.cols;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {{
    const long long row = t / a.cols, i = t % a.cols, first = row * a.cols;
    const unsigned long long v = kiln_order_key(a.x, t, a.descending);
    long long rank = 0;
    for (long long j = 0; j < a.cols; ++j) {{
      const unsigned long long w = kiln_order_key(a.x, first + j, a.descending);
      if (w < v || (w == v && j < i)) ++rank;
    }}
    if (rank < a.k) a.out[row * a.k + rank] = i;
  }}
}}
)",
                     kCudaBlock);
}

std::string cuda_radix_count_kernel(DType elem) {
  return radix_pass_head(elem) + fmt::format(R"(
extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{{1}
    if (threadIdx.x < 16u) {{
      long long total = 0;
      for (unsigned t = 0; t < blockDim.x; ++t) total += cnt[threadIdx.x * blockDim.x + t];
      a.counts[(s * 16 + threadIdx.x) * a.tiles + tile] = total;
    }}
    __syncthreads();
  }}
}}
)",
                                             kCudaBlock, kTileLoop);
}

std::string cuda_radix_scan_kernel() {
  return cuda_prelude() + fmt::format(R"(
struct Args {{ long long segs, seg_len, tiles; const void* x; const long long* in; long long* out; long long* counts; }};

// A block per segment: its 16 * tiles counts, in (digit, tile) order, made exclusive sums. Each
// thread sums a run of them, thread 0 scans the runs' sums, then each thread rewrites its run.
extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  long long* run = kiln_shared<long long>();
  const long long m = 16 * a.tiles, per = (m + blockDim.x - 1) / blockDim.x;
  for (long long s = blockIdx.x; s < a.segs; s += gridDim.x) {{
    long long* c = a.counts + s * m;
    const long long b = (long long)threadIdx.x * per, e = b + per < m ? b + per : m;
    long long sum = 0;
    for (long long i = b; i < e; ++i) sum += c[i];
    run[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {{
      long long acc = 0;
      for (unsigned t = 0; t < blockDim.x; ++t) {{ const long long v = run[t]; run[t] = acc; acc += v; }}
    }}
    __syncthreads();
    long long acc = run[threadIdx.x];
    for (long long i = b; i < e; ++i) {{ const long long v = c[i]; c[i] = acc; acc += v; }}
    __syncthreads();
  }}
}}
)",
                                      kCudaBlock);
}

std::string cuda_radix_scatter_kernel(DType elem) {
  // After the count: the table made exclusive sums in (digit, thread) order, so
  // cnt[d * block + t] - cnt[d * block] is how many of the tile's positions of digit d come
  // before thread t's. Thread t sums a run of 16 entries, thread 0 scans the runs' sums.
  return radix_pass_head(elem) + fmt::format(R"(
extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{{1}
    unsigned* run = cnt + 16 * blockDim.x;
    unsigned sum = 0;
    for (unsigned i = 0; i < 16u; ++i) sum += cnt[threadIdx.x * 16u + i];
    run[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {{
      unsigned acc = 0;
      for (unsigned t = 0; t < blockDim.x; ++t) {{ const unsigned v = run[t]; run[t] = acc; acc += v; }}
    }}
    __syncthreads();
    unsigned acc = run[threadIdx.x];
    for (unsigned i = 0; i < 16u; ++i) {{ const unsigned v = cnt[threadIdx.x * 16u + i]; cnt[threadIdx.x * 16u + i] = acc; acc += v; }}
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 8; ++j) {{
      const unsigned d = dig[j];
      if (d == 16u) continue;
      unsigned before = 0;
      for (int i = 0; i < j; ++i) before += dig[i] == d;
      const long long place = a.counts[(s * 16 + d) * a.tiles + tile] + (cnt[d * blockDim.x + threadIdx.x] - cnt[d * blockDim.x]) + before;
      a.out[seg + place] = pos[j];
    }}
    __syncthreads();
  }}
}}
)",
                                             kCudaBlock, kTileLoop);
}

std::string cuda_radix_histogram_kernel(DType elem) {
  return cuda_prelude() + order_key_function(elem) +
         fmt::format(R"(
struct Args {{ long long segs, seg_len; const void* x; unsigned long long* hist; const unsigned long long* state; long long shift, descending; }};

// Blocks take 8 * block elements of a row at a time; a shared histogram per block, added to
// the row's. The counts are integers, so the order of the atomic adds does not matter.
extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  unsigned* h = kiln_shared<unsigned>();
  const long long chunk = 8ll * blockDim.x, chunks = (a.seg_len + chunk - 1) / chunk;
  for (long long g = blockIdx.x; g < a.segs * chunks; g += gridDim.x) {{
    const long long s = g / chunks, b = (g % chunks) * chunk;
    const unsigned long long prefix = a.state[2 * s];
    h[threadIdx.x] = 0;
    __syncthreads();
    for (long long i = b + threadIdx.x; i < b + chunk && i < a.seg_len; i += blockDim.x) {{
      const unsigned long long key = kiln_order_key(a.x, s * a.seg_len + i, a.descending);
      if (a.shift + 8 < 64 && (key >> (a.shift + 8)) != (prefix >> (a.shift + 8))) continue;
      atomicAdd(&h[(key >> a.shift) & 255u], 1u);
    }}
    __syncthreads();
    if (h[threadIdx.x] != 0) atomicAdd(&a.hist[s * 256 + threadIdx.x], (unsigned long long)h[threadIdx.x]);
    __syncthreads();
  }}
}}
)",
                     kCudaBlock);
}

std::string cuda_radix_select_kernel() {
  return cuda_prelude() + fmt::format(R"(
struct Args {{ long long segs, k; unsigned long long* hist; unsigned long long* state; long long shift, first; }};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  for (long long s = blockIdx.x * (long long)blockDim.x + threadIdx.x; s < a.segs; s += (long long)gridDim.x * blockDim.x) {{
    unsigned long long* h = a.hist + s * 256;
    unsigned long long need = a.first ? (unsigned long long)a.k : a.state[2 * s + 1], below = 0;
    unsigned d = 0;
    while (d < 255u && below + h[d] < need) below += h[d++];
    a.state[2 * s] |= (unsigned long long)d << a.shift;
    a.state[2 * s + 1] = need - below;
    for (unsigned i = 0; i < 256u; ++i) h[i] = 0;
  }}
}}
)",
                                      kCudaBlock);
}

std::string cuda_radix_finish_kernel() {
  return cuda_prelude() + fmt::format(R"(
struct Args {{ long long segs, seg_len, k, sub; const long long* in; long long* out; }};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < a.segs * a.k; t += (long long)gridDim.x * blockDim.x) {{
    const long long s = t / a.k, i = t % a.k;
    a.out[t] = a.in[s * a.seg_len + i] - s * a.sub;
  }}
}}
)",
                                      kCudaBlock);
}

}  // namespace kiln::codegen
