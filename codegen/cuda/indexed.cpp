// codegen/cuda/indexed.cpp -- CUDA C of gather/index_select (pick), scatter_add/index_add
// (scatter) and argmax/argmin (arg); see indexed.h.
#include "codegen/cuda/indexed.h"

#include <fmt/format.h>

#include <algorithm>

#include "codegen/cuda/emit.h"
#include "runtime/check.h"

namespace kiln::codegen {
namespace {

const char* index_type(DType t) {
  switch (t) {
    case DType::I64: return "long long";
    case DType::I32: return "int";
    case DType::U8: return "unsigned char";
    default: break;
  }
  throw Error(fmt::format("codegen: {} is not an index dtype", dtype_name(t)));
}

// The statement adding b into *a (the element's C type: cuda_element_type).
std::string add_into(DType t, const std::string& a, const std::string& b) {
  switch (t) {
    case DType::F32:
    case DType::F64: return fmt::format("{} += {};", a, b);
    case DType::I32: return fmt::format("{0} = (int)((unsigned){0} + (unsigned){1});", a, b);
    case DType::I64: return fmt::format("{0} = (long long)((unsigned long long){0} + (unsigned long long){1});", a, b);
    case DType::U8: return fmt::format("{0} = (unsigned char)({0} + {1});", a, b);
    case DType::Bool: return fmt::format("{0} = (unsigned char)({0} || {1});", a, b);
    case DType::F16:
    case DType::BF16: break;  // callers sum these in f32 and round once, as the CPU does
  }
  throw Error(fmt::format("codegen: a scatter adds in {}: sum it in f32", dtype_name(t)));
}

const char* kCheckIndex = R"(
    if (k < -n || k >= n) { a.err[1] = k; a.err[0] = 1; continue; }
    if (k < 0) k += n;)";

}  // namespace

std::string cuda_pick_kernel(DType elem, DType index, int rank) {
  KILN_CHECK(rank >= 1 && rank <= 16, "codegen: pick of rank {}", rank);
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long size[{0}], out_stride[{0}], x_stride[{0}], idx_stride[{0}];
  void* out; const void* x; const void* idx; long long* err;
  long long dim_size, x_dim_stride;
}};

extern "C" __global__ __launch_bounds__({1}) void kiln_kernel(const Args a) {{
  long long total = 1;
  for (int d = 0; d < {0}; ++d) total *= a.size[d];
  const long long n = a.dim_size;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {{
    long long r = i, o = 0, x = 0, ix = 0;
    for (int d = {0} - 1; d >= 0; --d) {{
      long long c = r % a.size[d];
      r /= a.size[d];
      o += c * a.out_stride[d];
      x += c * a.x_stride[d];
      ix += c * a.idx_stride[d];
    }}
    long long k = (long long)((const {2}*)a.idx)[ix];{4}
    (({3}*)a.out)[o] = ((const {3}*)a.x)[x + k * a.x_dim_stride];
  }}
}}
)",
                                      rank, kCudaBlock, index_type(index), cuda_bits_type(elem), kCheckIndex);
}

std::string cuda_scatter_kernel(DType elem, DType index, int rank) {
  KILN_CHECK(rank >= 1 && rank <= 16, "codegen: scatter of rank {}", rank);
  const char* t = cuda_element_type(elem);
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long size[{0}], src_stride[{0}], out_stride[{0}], idx_stride[{0}];
  void* out; const void* src; const void* idx; long long* err;
  long long dim, out_dim_size, out_dim_stride;
}};

// One thread per position of the dims other than dim: its entries along dim, in order.
extern "C" __global__ __launch_bounds__({1}) void kiln_kernel(const Args a) {{
  long long columns = 1;
  for (int d = 0; d < {0}; ++d)
    if (d != a.dim) columns *= a.size[d];
  const long long n = a.out_dim_size;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < columns; i += (long long)gridDim.x * blockDim.x) {{
    long long r = i, o = 0, s = 0, ix = 0;
    for (int d = {0} - 1; d >= 0; --d) {{
      if (d == a.dim) continue;
      long long c = r % a.size[d];
      r /= a.size[d];
      o += c * a.out_stride[d];
      s += c * a.src_stride[d];
      ix += c * a.idx_stride[d];
    }}
    for (long long j = 0; j < a.size[a.dim]; ++j) {{
      long long k = (long long)((const {2}*)a.idx)[ix + j * a.idx_stride[a.dim]];{4}
      {3}* dst = ({3}*)a.out + o + k * a.out_dim_stride;
      {3} v = ((const {3}*)a.src)[s + j * a.src_stride[a.dim]];
      {5}
    }}
  }}
}}
)",
                                      rank, kCudaBlock, index_type(index), t, kCheckIndex, add_into(elem, "*dst", "v"));
}

std::string cuda_index_keys_kernel(DType index) {
  return cuda_prelude() + fmt::format(R"(
struct Args {{ long long n, padded; const void* idx; long long idx_stride, dim_size; long long* err; long long* keys; long long* pos; }};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  const long long n = a.dim_size;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.padded; i += (long long)gridDim.x * blockDim.x) {{
    long long k = 0x7fffffffffffffffll;  // padding sorts last
    if (i < a.n) {{
      k = (long long)((const {1}*)a.idx)[i * a.idx_stride];
      if (k < -n || k >= n) {{ a.err[1] = k; a.err[0] = 1; k = 0; }}
      if (k < 0) k += n;
    }}
    a.keys[i] = k;
    a.pos[i] = i;
  }}
}}
)",
                                      kCudaBlock, index_type(index));
}

std::string cuda_bitonic_kernel() {
  return cuda_prelude() + fmt::format(R"(
struct Args {{ long long padded, j, k; long long* keys; long long* pos; }};

// One compare-exchange step of a bitonic sort of (key, position) pairs: positions are distinct,
// so the order is total and equal keys keep their positions' order.
extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < a.padded; t += (long long)gridDim.x * blockDim.x) {{
    const long long p = t ^ a.j;
    if (p <= t) continue;
    const long long kt = a.keys[t], kp = a.keys[p], pt = a.pos[t], pp = a.pos[p];
    const bool greater = kt > kp || (kt == kp && pt > pp);
    if (greater == ((t & a.k) == 0)) {{
      a.keys[t] = kp; a.keys[p] = kt;
      a.pos[t] = pp; a.pos[p] = pt;
    }}
  }}
}}
)",
                                      kCudaBlock);
}

std::string cuda_segment_add_kernel(DType elem, int rank) {
  KILN_CHECK(rank >= 1 && rank <= 16, "codegen: index_add of rank {}", rank);
  const char* t = cuda_element_type(elem);
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long size[{0}], src_stride[{0}], out_stride[{0}];
  void* out; const void* src; const long long* keys; const long long* pos;
  long long n, dim, out_dim_stride;
}};

// A thread per (sorted entry, column): the first entry of each run of equal indices adds the
// run's rows of src, in their order, to its row of out.
extern "C" __global__ __launch_bounds__({1}) void kiln_kernel(const Args a) {{
  long long columns = 1;
  for (int d = 0; d < {0}; ++d)
    if (d != a.dim) columns *= a.size[d];
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < a.n * columns; t += (long long)gridDim.x * blockDim.x) {{
    const long long p = t / columns, i = t % columns, k = a.keys[p];
    if (p > 0 && a.keys[p - 1] == k) continue;
    long long r = i, o = 0, s = 0;
    for (int d = {0} - 1; d >= 0; --d) {{
      if (d == a.dim) continue;
      long long c = r % a.size[d];
      r /= a.size[d];
      o += c * a.out_stride[d];
      s += c * a.src_stride[d];
    }}
    {2}* dst = ({2}*)a.out + o + k * a.out_dim_stride;
    {2} acc = *dst;
    for (long long q = p; q < a.n && a.keys[q] == k; ++q) {{
      const {2} v = ((const {2}*)a.src)[s + a.pos[q] * a.src_stride[a.dim]];
      {3}
    }}
    *dst = acc;
  }}
}}
)",
                                      rank, kCudaBlock, t, add_into(elem, "acc", "v"));
}

bool scatter_add_sorts(int64_t lines, int64_t length, int multiprocessors) {
  // A line's walk is serial: with fewer lines than 256 threads per multiprocessor the device
  // sits mostly idle while long lines are walked; then sorting every entry pays.
  return length >= 16 && lines < 256 * static_cast<int64_t>(std::max(multiprocessors, 1));
}

std::string cuda_scatter_keys_kernel(DType index, int rank) {
  KILN_CHECK(rank >= 1 && rank <= 16, "codegen: scatter_add of rank {}", rank);
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long size[{0}], idx_stride[{0}], out_size[{0}];
  long long n, padded, dim;
  const void* idx; long long* err; long long* keys; long long* pos;
}};

// Entry i (row-major over src's shape) goes to out's element q, i's position with dim replaced
// by its index: the key is q row-major over out's shape.
extern "C" __global__ __launch_bounds__({1}) void kiln_kernel(const Args a) {{
  const long long n = a.out_size[a.dim];
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.padded; i += (long long)gridDim.x * blockDim.x) {{
    long long key = 0x7fffffffffffffffll;  // padding sorts last
    if (i < a.n) {{
      long long r = i, c[{0}], ix = 0;
      for (int d = {0} - 1; d >= 0; --d) {{
        c[d] = r % a.size[d];
        r /= a.size[d];
        ix += c[d] * a.idx_stride[d];
      }}
      long long k = (long long)((const {2}*)a.idx)[ix];
      if (k < -n || k >= n) {{ a.err[1] = k; a.err[0] = 1; k = 0; }}
      if (k < 0) k += n;
      c[a.dim] = k;
      key = 0;
      for (int d = 0; d < {0}; ++d) key = key * a.out_size[d] + c[d];
    }}
    a.keys[i] = key;
    a.pos[i] = i;
  }}
}}
)",
                                      rank, kCudaBlock, index_type(index));
}

std::string cuda_scatter_segment_kernel(DType elem, int rank) {
  KILN_CHECK(rank >= 1 && rank <= 16, "codegen: scatter_add of rank {}", rank);
  const char* t = cuda_element_type(elem);
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long size[{0}], src_stride[{0}], out_size[{0}], out_stride[{0}];
  void* out; const void* src; const long long* keys; const long long* pos; long long n;
}};

// A thread per sorted entry: where a run of equal keys starts, it adds the run's entries of
// src, in their order, to its element of out (already x).
extern "C" __global__ __launch_bounds__({1}) void kiln_kernel(const Args a) {{
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < a.n; t += (long long)gridDim.x * blockDim.x) {{
    const long long k = a.keys[t];
    if (t > 0 && a.keys[t - 1] == k) continue;
    long long r = k, o = 0;
    for (int d = {0} - 1; d >= 0; --d) {{
      o += (r % a.out_size[d]) * a.out_stride[d];
      r /= a.out_size[d];
    }}
    {2}* dst = ({2}*)a.out + o;
    {2} acc = *dst;
    for (long long q = t; q < a.n && a.keys[q] == k; ++q) {{
      long long e = a.pos[q], s = 0;
      for (int d = {0} - 1; d >= 0; --d) {{
        s += (e % a.size[d]) * a.src_stride[d];
        e /= a.size[d];
      }}
      const {2} v = ((const {2}*)a.src)[s];
      {3}
    }}
    *dst = acc;
  }}
}}
)",
                                      rank, kCudaBlock, t, add_into(elem, "acc", "v"));
}

std::string cuda_arg_kernel(DType elem, bool largest) {
  std::string load;
  switch (elem) {
    case DType::F16: load = "(double)kiln_h2f(p[j])"; break;
    case DType::BF16: load = "(double)kiln_bf2f(p[j])"; break;
    default: load = "(double)p[j]"; break;
  }
  const char* better = largest ? ">" : "<";
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long rows, cols;
  const void* x; long long* out;
}};

// (v, i) or (w, j), whichever the CPU's in-order scan keeps: NaN first, then the {4} value,
// then the lower index.
__device__ __forceinline__ bool kiln_keeps_second(double v, long long i, double w, long long j) {{
  if (v != v || w != w) return v != v ? (w == w ? false : j < i) : true;
  if (w {3} v) return true;
  return w == v && j < i;
}}

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  double* sv = kiln_shared<double>();
  long long* si = (long long*)(sv + 32);
  for (long long row = blockIdx.x; row < a.rows; row += gridDim.x) {{
    const {1}* p = (const {1}*)a.x + row * a.cols;
    double bv = 0;
    long long bi = -1;
    for (long long j = threadIdx.x; j < a.cols; j += blockDim.x) {{
      double v = {2};
      if (bi < 0 || kiln_keeps_second(bv, bi, v, j)) {{ bv = v; bi = j; }}
    }}
    for (int m = 16; m > 0; m /= 2) {{
      double ov = __shfl_xor_sync(0xffffffffu, bv, m);
      long long oi = __shfl_xor_sync(0xffffffffu, bi, m);
      if (oi >= 0 && (bi < 0 || kiln_keeps_second(bv, bi, ov, oi))) {{ bv = ov; bi = oi; }}
    }}
    if (threadIdx.x % 32 == 0) {{ sv[threadIdx.x / 32] = bv; si[threadIdx.x / 32] = bi; }}
    __syncthreads();
    if (threadIdx.x < 32) {{
      bool has = threadIdx.x < blockDim.x / 32;
      double wv = has ? sv[threadIdx.x] : 0;
      long long wi = has ? si[threadIdx.x] : -1;
      for (int m = 16; m > 0; m /= 2) {{
        double ov = __shfl_xor_sync(0xffffffffu, wv, m);
        long long oi = __shfl_xor_sync(0xffffffffu, wi, m);
        if (oi >= 0 && (wi < 0 || kiln_keeps_second(wv, wi, ov, oi))) {{ wv = ov; wi = oi; }}
      }}
      if (threadIdx.x == 0) a.out[row] = wi < 0 ? 0 : wi;
    }}
    __syncthreads();
  }}
}}
)",
                                      kCudaBlock, cuda_element_type(elem), load, better,
                                      largest ? "larger" : "smaller");
}

namespace {
// The element at p[i] as the type a scan or an ordering computes in: f32 for f16 and bf16.
std::string load_wide(DType t, const std::string& e) {
  if (t == DType::F16) return "kiln_h2f(" + e + ")";
  if (t == DType::BF16) return "kiln_bf2f(" + e + ")";
  return e;
}
}  // namespace

std::string cuda_cumsum_kernel(DType elem, bool reverse) {
  bool f = is_float(elem);
  std::string acc = elem == DType::F64 ? "double" : f ? "float" : "long long";
  std::string out = f ? cuda_element_type(elem) : "long long";
  std::string add = f ? "acc += " + load_wide(elem, "p[i]") + ";"
                      : "acc = (long long)((unsigned long long)acc + (unsigned long long)(long long)p[i]);";
  std::string store = elem == DType::F16 ? "kiln_f2h(acc)" : elem == DType::BF16 ? "kiln_f2bf(acc)" : "acc";
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long rows, cols;
  const void* x; void* out;
}};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  for (long long row = blockIdx.x * (long long)blockDim.x + threadIdx.x; row < a.rows;
       row += (long long)gridDim.x * blockDim.x) {{
    const {1}* p = (const {1}*)a.x + row * a.cols;
    {2}* o = ({2}*)a.out + row * a.cols;
    {3} acc = 0;
    for (long long j = 0; j < a.cols; ++j) {{
      long long i = {4} ? a.cols - 1 - j : j;
      {5}
      o[i] = {6};
    }}
  }}
}}
)",
                                      kCudaBlock, cuda_element_type(elem), out, acc, reverse ? 1 : 0, add, store);
}

std::string cuda_iota_kernel() {
  return cuda_prelude() + fmt::format(R"(
struct Args {{
  long long n;
  long long* out;
}};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x)
    a.out[i] = i;
}}
)",
                                      kCudaBlock);
}

}  // namespace kiln::codegen
