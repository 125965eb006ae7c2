// codegen/cuda/attention_mma.cpp -- the tensor-core attention kernels' CUDA C (see
// attention_mma.h). They follow attention.cpp's helpers (Args, masked_score, drop_tile) in the
// kernel's text, so the two forms read one definition of the scores, the mask and the dropout.
#include "codegen/cuda/attention_mma.h"

#include <fmt/format.h>

#include "codegen/cuda/emit.h"

namespace kiln::codegen::attention_mma {
namespace {

constexpr int kWarpRows = 16;

int64_t round16(int64_t d) { return (d + 15) / 16 * 16; }

// The fragment functions: PTX's wmma on a device, whole tiles per lane on the host CUDA
// (tests/cuda/host/emulation_cuda.h). A is row-major; B is read column-major (a tile of rows
// taken as its transpose: q k^T) or row-major (P v); every pointer is 32-byte aligned and every
// stride a multiple of 16 bytes, as the instructions require.
const char* kFragments = R"(
#ifndef KILN_HOST_CUDA
#if KW_TF32
// f32: each 16 columns (rows of B) as two m16n16k8 TF32 fragments, each split in two terms
// (KW_TF32 1) or rounded once (2).
#define KW_LOAD8(which, lay, r, p, ld) asm volatile("wmma.load." which ".sync.aligned." lay ".m16n16k8.tf32 {%0,%1,%2,%3}, [%4], %5;" \
    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p), "r"(ld) : "memory")
#define KW_MMA8(alay, blay, c, a, b) asm volatile("wmma.mma.sync.aligned." alay "." blay ".m16n16k8.f32.tf32.tf32.f32 " \
    "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3,%4,%5,%6,%7};" \
    : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3]), "+f"(c.x[4]), "+f"(c.x[5]), "+f"(c.x[6]), "+f"(c.x[7]) \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]))
struct kiln_frag_a { unsigned x[8]; };  // f32 bits: columns (B: rows) 0-7, then 8-15
__device__ __forceinline__ unsigned kiln_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
#define KW_LOAD(which, lay, f, p, ld, half) do { \
    KW_LOAD8(which, lay, f.x, p, ld); \
    KW_LOAD8(which, lay, (f.x + 4), (p) + (half), ld); \
  } while (0)
// The terms are made where they are used: the compiler keeps those of a fragment that stays
// (the warp's queries) across the tile loop where registers allow, and remakes them where not
// (the keys pass, which holds two fragments of k and v a row).
__device__ __forceinline__ void kiln_tf32_split(const unsigned* x, unsigned* big, unsigned* small) {
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const float v = __uint_as_float(x[u]);
    big[u] = kiln_tf32(v);
    if (KW_TF32 == 1) small[u] = kiln_tf32(v - __uint_as_float(big[u]));
  }
}
#define KW_MMA(alay, blay, c, a, b) do { \
    unsigned ab[8], as[8], bb[8], bs[8]; \
    kiln_tf32_split(a.x, ab, as); \
    kiln_tf32_split(b.x, bb, bs); \
    KW_MMA8(alay, blay, c, ab, bb); \
    KW_MMA8(alay, blay, c, (ab + 4), (bb + 4)); \
    if (KW_TF32 == 1) { \
      KW_MMA8(alay, blay, c, ab, bs); \
      KW_MMA8(alay, blay, c, (ab + 4), (bs + 4)); \
      KW_MMA8(alay, blay, c, as, bb); \
      KW_MMA8(alay, blay, c, (as + 4), (bb + 4)); \
    } \
  } while (0)
#elif KW_BF16
#define KW_LOAD(which, lay, f, p, ld) asm volatile("wmma.load." which ".sync.aligned." lay ".m16n16k16.bf16 {%0,%1,%2,%3}, [%4], %5;" \
    : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3]) : "l"(p), "r"(ld) : "memory")
#define KW_MMA(alay, blay, c, a, b) asm volatile("wmma.mma.sync.aligned." alay "." blay ".m16n16k16.f32.bf16.bf16.f32 " \
    "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3,%4,%5,%6,%7};" \
    : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3]), "+f"(c.x[4]), "+f"(c.x[5]), "+f"(c.x[6]), "+f"(c.x[7]) \
    : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]), "r"(b.x[2]), "r"(b.x[3]))
#define KW_REGS 4
#else
#define KW_LOAD(which, lay, f, p, ld) asm volatile("wmma.load." which ".sync.aligned." lay ".m16n16k16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8], %9;" \
    : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3]), "=r"(f.x[4]), "=r"(f.x[5]), "=r"(f.x[6]), "=r"(f.x[7]) \
    : "l"(p), "r"(ld) : "memory")
#define KW_MMA(alay, blay, c, a, b) asm volatile("wmma.mma.sync.aligned." alay "." blay ".m16n16k16.f32.f32 " \
    "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19,%20,%21,%22,%23}, {%0,%1,%2,%3,%4,%5,%6,%7};" \
    : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3]), "+f"(c.x[4]), "+f"(c.x[5]), "+f"(c.x[6]), "+f"(c.x[7]) \
    : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(a.x[4]), "r"(a.x[5]), "r"(a.x[6]), "r"(a.x[7]), \
      "r"(b.x[0]), "r"(b.x[1]), "r"(b.x[2]), "r"(b.x[3]), "r"(b.x[4]), "r"(b.x[5]), "r"(b.x[6]), "r"(b.x[7]))
#define KW_REGS 8
#endif
// A flag another block sets (the backward's semaphores): read with acquire, written with
// release, at the device's scope (the host CUDA's emulation header has its own).
__device__ __forceinline__ unsigned kiln_load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void kiln_store_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
// Dynamic shared memory, 128-byte aligned (the prelude's kiln_shared promises 16; wmma needs 32).
template <typename T> __device__ __forceinline__ T* kiln_mma_shared() {
  extern __shared__ __align__(128) unsigned char kiln_mma_smem[];
  return reinterpret_cast<T*>(kiln_mma_smem);
}
#if !KW_TF32
struct kiln_frag_a { unsigned x[KW_REGS]; };
#endif
typedef kiln_frag_a kiln_frag_b;
struct kiln_frag_c { float x[8]; };
__device__ __forceinline__ void kiln_mma_zero(kiln_frag_c& c) {
#pragma unroll
  for (int u = 0; u < 8; ++u) c.x[u] = 0.f;
}
#if KW_TF32  // (the second half of K: columns 8 on of a row-major A and of a column-major B, rows 8 on of the others)
__device__ __forceinline__ void kiln_mma_load_a(kiln_frag_a& f, const TM* p, int ld) { KW_LOAD("a", "row", f, p, ld, 8); }
__device__ __forceinline__ void kiln_mma_load_a_col(kiln_frag_a& f, const TM* p, int ld) { KW_LOAD("a", "col", f, p, ld, 8 * ld); }
__device__ __forceinline__ void kiln_mma_load_b_col(kiln_frag_b& f, const TM* p, int ld) { KW_LOAD("b", "col", f, p, ld, 8); }
__device__ __forceinline__ void kiln_mma_load_b_row(kiln_frag_b& f, const TM* p, int ld) { KW_LOAD("b", "row", f, p, ld, 8 * ld); }
#else
__device__ __forceinline__ void kiln_mma_load_a(kiln_frag_a& f, const TM* p, int ld) { KW_LOAD("a", "row", f, p, ld); }
__device__ __forceinline__ void kiln_mma_load_a_col(kiln_frag_a& f, const TM* p, int ld) { KW_LOAD("a", "col", f, p, ld); }
__device__ __forceinline__ void kiln_mma_load_b_col(kiln_frag_b& f, const TM* p, int ld) { KW_LOAD("b", "col", f, p, ld); }
__device__ __forceinline__ void kiln_mma_load_b_row(kiln_frag_b& f, const TM* p, int ld) { KW_LOAD("b", "row", f, p, ld); }
#endif
__device__ __forceinline__ void kiln_mma_col(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { KW_MMA("row", "col", c, a, b); }
__device__ __forceinline__ void kiln_mma_row(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { KW_MMA("row", "row", c, a, b); }
// A read column-major (the transpose of what it points at), B row-major.
__device__ __forceinline__ void kiln_mma_at(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { KW_MMA("col", "row", c, a, b); }
__device__ __forceinline__ void kiln_mma_store(float* p, const kiln_frag_c& c, int ld) {
  asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8}, %9;"
               :: "l"(p), "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]), "f"(c.x[4]), "f"(c.x[5]), "f"(c.x[6]),
                  "f"(c.x[7]), "r"(ld) : "memory");
}
#else
template <typename T> T* kiln_mma_shared() { return kiln_shared<T>(); }  // 128-byte aligned
typedef kiln_host::MmaTile kiln_frag_c;
inline void kiln_mma_zero(kiln_frag_c& c) { kiln_host::mma_zero(c); }
inline void kiln_mma_store(float* p, const kiln_frag_c& c, int ld) { kiln_host::mma_store(p, c, ld); }
#if KW_TF32  // whole tiles of each term (emulation_cuda.h)
struct kiln_frag_a { kiln_host::MmaTile big, small; };
typedef kiln_frag_a kiln_frag_b;
inline void kiln_mma_load_tf32(kiln_frag_a& f, const TM* p, int ld, bool transposed) {
  kiln_host::mma_load_tf32(f.big, p, ld, transposed, 1);
  if (KW_TF32 == 1) kiln_host::mma_load_tf32(f.small, p, ld, transposed, 2);
}
inline void kiln_mma_load_a(kiln_frag_a& f, const TM* p, int ld) { kiln_mma_load_tf32(f, p, ld, false); }
inline void kiln_mma_load_a_col(kiln_frag_a& f, const TM* p, int ld) { kiln_mma_load_tf32(f, p, ld, true); }
inline void kiln_mma_load_b_col(kiln_frag_b& f, const TM* p, int ld) { kiln_mma_load_tf32(f, p, ld, true); }
inline void kiln_mma_load_b_row(kiln_frag_b& f, const TM* p, int ld) { kiln_mma_load_tf32(f, p, ld, false); }
inline void kiln_mma_tf32(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) {
  kiln_host::mma(c, a.big, b.big);
  if (KW_TF32 == 1) kiln_host::mma(c, a.big, b.small), kiln_host::mma(c, a.small, b.big);
}
inline void kiln_mma_col(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { kiln_mma_tf32(c, a, b); }
inline void kiln_mma_row(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { kiln_mma_tf32(c, a, b); }
inline void kiln_mma_at(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { kiln_mma_tf32(c, a, b); }
#else
typedef kiln_host::MmaTile kiln_frag_a;
typedef kiln_host::MmaTile kiln_frag_b;
inline void kiln_mma_load_a(kiln_frag_a& f, const TM* p, int ld) { kiln_host::mma_load(f, p, ld, false, KW_BF16); }
inline void kiln_mma_load_a_col(kiln_frag_a& f, const TM* p, int ld) { kiln_host::mma_load(f, p, ld, true, KW_BF16); }
inline void kiln_mma_load_b_col(kiln_frag_b& f, const TM* p, int ld) { kiln_host::mma_load(f, p, ld, true, KW_BF16); }
inline void kiln_mma_load_b_row(kiln_frag_b& f, const TM* p, int ld) { kiln_host::mma_load(f, p, ld, false, KW_BF16); }
inline void kiln_mma_col(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { kiln_host::mma(c, a, b); }
inline void kiln_mma_row(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { kiln_host::mma(c, a, b); }
inline void kiln_mma_at(kiln_frag_c& c, const kiln_frag_a& a, const kiln_frag_b& b) { kiln_host::mma(c, a, b); }
#endif
#endif

// The warp's rows [r0, r0 + 16) of x [rows, dim] (of batch b) as N A fragments, 16 columns at a
// time through buf (stride KA_PS); zeros past the ends.
template <int N>
__device__ __forceinline__ void mma_stage_rows(kiln_frag_a* f, TM* buf, const TM* x, long long b, long long rows, long long r0, int dim, int lane) {
#pragma unroll
  for (int kk = 0; kk < N; ++kk) {
    for (int u = lane; u < 256; u += 32) {
      const int r = u / 16, c = kk * 16 + u % 16;
      buf[r * KA_PS + u % 16] = r0 + r < rows && c < dim ? x[(b * rows + r0 + r) * dim + c] : (TM)0;
    }
    __syncwarp();
    kiln_mma_load_a(f[kk], buf, KA_PS);
    __syncwarp();
  }
}
// Rows [r0, r0 + nr) of x [rows, dim] into tile t (stride ts), columns padded with zeros to
// `padded`, and rows past the end zeros: 16 bytes at a time where the rows allow it.
__device__ __forceinline__ void mma_load_tile(TM* t, int ts, const TM* x, long long b, long long rows, long long r0, int dim, int padded, int nr = KA_R) {
  const int n = 16 / (int)sizeof(TM);  // elements in 16 bytes
  if (dim % n == 0 && ((unsigned long long)x & 15u) == 0) {
    struct alignas(16) Chunk { unsigned w[4]; };
    const int per = padded / n;
    for (int u = threadIdx.x; u < nr * per; u += blockDim.x) {
      const int r = u / per, c = u % per;
      Chunk v = {{0u, 0u, 0u, 0u}};
      if (r0 + r < rows && c * n < dim) v = ((const Chunk*)(x + (b * rows + r0 + r) * dim))[c];
      ((Chunk*)(t + r * ts))[c] = v;
    }
    return;
  }
  for (int u = threadIdx.x; u < nr * padded; u += blockDim.x) {
    const int r = u / padded, c = u % padded;
    t[r * ts + c] = r0 + r < rows && c < dim ? x[(b * rows + r0 + r) * dim + c] : (TM)0;
  }
}
// out [16][KA_R] (stride KA_SS) = the warp's 16 rows times the tile's KA_R rows (stride ts),
// transposed: each warp row's dot products with each tile row. The warp's rows come from N
// fragments f, or where f is null from shared memory (a, row stride as) as they are used:
// registers for the backward's accumulators.
template <int N>
__device__ __forceinline__ void mma_dots(float* out, const kiln_frag_a* f, const TM* a, int as, const TM* t, int ts) {
#pragma unroll
  for (int n = 0; n < KA_R / 16; ++n) {
    kiln_frag_c c;
    kiln_mma_zero(c);
#pragma unroll
    for (int kk = 0; kk < N; ++kk) {
      kiln_frag_b bf;
      kiln_mma_load_b_col(bf, t + n * 16 * ts + kk * 16, ts);
      if (f) {
        kiln_mma_col(c, f[kk], bf);
      } else {
        kiln_frag_a af;
        kiln_mma_load_a(af, a + kk * 16, as);
        kiln_mma_col(c, af, bf);
      }
    }
    kiln_mma_store(out + n * 16, c, KA_SS);
  }
}
// acc[cc][u] = acc[cc][u] * keep + (w t)[lane's row][its 8 columns of chunk cc], for the N
// 16-column chunks of tile t (KA_R rows, stride ts), with w the warp's [16][KA_R] weights in
// buf (stride KA_PS); each chunk's product passes through stage (stride KA_SS).
template <int N>
__device__ __forceinline__ void mma_add_products(float (*acc)[8], float keep, const TM* w, const TM* t, int ts, float* stage, int lane) {
  kiln_frag_a wf[KA_R / 16];
#pragma unroll
  for (int kk = 0; kk < KA_R / 16; ++kk) kiln_mma_load_a(wf[kk], w + kk * 16, KA_PS);
#pragma unroll
  for (int cc = 0; cc < N; ++cc) {
    kiln_frag_c c;
    kiln_mma_zero(c);
#pragma unroll
    for (int kk = 0; kk < KA_R / 16; ++kk) {
      kiln_frag_b bf;
      kiln_mma_load_b_row(bf, t + kk * 16 * ts + cc * 16, ts);
      kiln_mma_row(c, wf[kk], bf);
    }
    kiln_mma_store(stage, c, KA_SS);
    __syncwarp();
#pragma unroll
    for (int u = 0; u < 8; ++u) acc[cc][u] = acc[cc][u] * keep + stage[(lane >> 1) * KA_SS + (lane & 1) * 8 + u];
    __syncwarp();
  }
}
// The lane's half of its row's scores in the tile (x[t]: key j0 + (lane & 1) * KA_H + t, from
// the warp's dot products S), scaled and masked; returns the row's running max m after them.
__device__ __forceinline__ float mma_row_scores(float* x, const float* S, const Args& a, long long row_off, long long i,
                                                long long j0, bool live, int lane, float m) {
  const int h = lane & 1;
  float mt = -KA_INF;
  for (int t = 0; t < KA_H; ++t) {
    const long long j = j0 + h * KA_H + t;
    x[t] = live && j < a.s ? masked_score(a, S[(lane >> 1) * KA_SS + h * KA_H + t], row_off, i, j) : -KA_INF;
    mt = x[t] > mt ? x[t] : mt;
  }
  const float mo = __shfl_xor_sync(0xffffffffu, mt, 1);
  mt = mo > mt ? mo : mt;
  return mt > m ? mt : m;
}
// The warp's accumulators [16][N * 16] into rows [r0, r0 + 16) of out (row stride `stride`,
// `dim` columns), times `mul`.
template <int N>
__device__ __forceinline__ void mma_store_rows(TM* out, long long stride, long long r0, long long rows, int dim, float (*acc)[8], float mul, int lane) {
  const long long r = r0 + (lane >> 1);
  if (r >= rows) return;
#pragma unroll
  for (int cc = 0; cc < N; ++cc)
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int c = cc * 16 + (lane & 1) * 8 + u;
      if (c < dim) out[r * stride + c] = KA_STORE(acc[cc][u] * mul);
    }
}
)";

// Shared memory, in order: two tiles (k and v, or q and dO) [KA_R][dim + 8] of the input
// dtype; per warp, `floats` buffers [16][KA_R + 4] of f32 and one [16][KA_R + 8] of the
// input dtype; the Keys pass's stats [KA_R][2]. Every region stays 32-byte aligned.
const char* kForward = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  TM* kt = kiln_mma_shared<TM>();                  // [R][QS]
  TM* vt = kt + KA_R * KA_QS;                      // [R][VS]
  float* sb = (float*)(vt + KA_R * KA_VS);         // [W][16][SS]
  TM* pb = (TM*)(sb + KA_W * 16 * KA_SS);          // [W][16][PS]
  unsigned char* keep = (unsigned char*)(pb + KA_W * 16 * KA_PS);  // [BR][R] with dropout
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, h = lane & 1;
  float* S = sb + warp * 16 * KA_SS;
  TM* P = pb + warp * 16 * KA_PS;
  const long long groups = (a.l + KA_BR - 1) / KA_BR;
  const unsigned tasks = (unsigned)(a.batch * groups);  // below 2^32 (cuda/attention.cpp checks)
  for (unsigned task = blockIdx.x; task < tasks; task += gridDim.x) {
    const long long b = task / groups, i0 = task % groups * KA_BR, iw = i0 + warp * 16, i = iw + (lane >> 1);
    const bool live = i < a.l;
    kiln_frag_a qf[KA_EP / 16];
    __syncthreads();
    mma_stage_rows<KA_EP / 16>(qf, P, a.q, b, a.l, iw, (int)a.e, lane);
    long long row_off = 0;
#if KA_MASK
    row_off = mask_offset(a, b) + (live ? i : 0) * a.mask_row;
#endif
    float m = -KA_INF, sum = 0, acc[KA_EVP / 16][8];
    for (int c = 0; c < KA_EVP / 16; ++c)
      for (int u = 0; u < 8; ++u) acc[c][u] = 0;
    long long keys = a.s;
#if KA_CAUSAL
    keys = i0 + KA_BR < a.s ? i0 + KA_BR : a.s;
#endif
    for (long long j0 = 0; j0 < keys; j0 += KA_R) {
      __syncthreads();
      mma_load_tile(kt, KA_QS, a.k, b, a.s, j0, (int)a.e, KA_EP);
      mma_load_tile(vt, KA_VS, a.v, b, a.s, j0, (int)a.ev, KA_EVP);
#if KA_DROPOUT
      drop_tile(a, b, i0, KA_BR, j0, KA_R, keep);
#endif
      __syncthreads();
      if (iw >= a.l || (KA_CAUSAL && j0 > iw + 15)) continue;  // the warp's rows see none of these keys
      mma_dots<KA_EP / 16>(S, qf, nullptr, 0, kt, KA_QS);
      __syncwarp();
      float x[KA_H];
      const float mn = mma_row_scores(x, S, a, row_off, i, j0, live, lane, m);
      const float corr = mn == -KA_INF ? 0.f : KA_EXP(m - mn);
      float ps = 0;
      for (int t = 0; t < KA_H; ++t) {
        float p = mn == -KA_INF ? 0.f : KA_EXP(x[t] - mn);
        ps += p;
        if (p != 0.f) p *= drop_of(a, keep, (int)(i - i0) * KA_R + h * KA_H + t);
        P[(lane >> 1) * KA_PS + h * KA_H + t] = KA_STORE(p);
      }
      sum = sum * corr + ps;
      m = mn;
      __syncwarp();
      mma_add_products<KA_EVP / 16>(acc, corr, P, vt, KA_VS, S, lane);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    mma_store_rows<KA_EVP / 16>(a.result + b * a.l * a.ev, a.ev, iw, a.l, (int)a.ev, acc, m == -KA_INF ? KA_NAN : 1.f / sum, lane);
    if (a.lse && live && h == 0) store_lse(a, b * a.l + i, m == -KA_INF ? -KA_INF : m + KA_LOG(sum));
  }
}
)";

// One kernel for dq, dk and dv (FlashAttention-2's backward), a block per 128 keys of a batch
// entry: the keys in shared memory, each warp's 16 rows of v in fragments. Per tile of KA_R
// queries, each warp scores its keys against them (S = k q^T, T = v dO^T), makes P and dS, adds
// (f P)^T dO to dv and dS^T q to dk in registers, and the block then adds dS^T k to the tile's
// dq. The key blocks add to a tile's dq in a fixed order, the last block first: each waits for
// the one before (a semaphore per tile that counts them), so dq is the same run to run. The
// blocks of a batch entry run in that order too (the last block's index is the lowest), so
// the block waited for was started first, and a grid larger than the device still finishes
// (the host CUDA, which runs blocks one by one, never waits). dq sums in f32 (dq_acc); the
// first key block (the last to add) stores it in the result's dtype.
const char* kBackward = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  TM* kb = kiln_mma_shared<TM>();                  // [BR][QS]
  TM* qt = kb + KA_BR * KA_QS;                     // [R][QS]
  TM* gt = qt + KA_R * KA_QS;                      // [R][VS]
  float* sb = (float*)(gt + KA_R * KA_VS);         // [W][2][16][SS]
  TM* pb = (TM*)(sb + KA_W * 32 * KA_SS);          // [W][16][PS]: dS of the block's keys, [BR][PS]
  float* st = (float*)(pb + KA_W * 16 * KA_PS);    // [R][2]
  unsigned char* keep = (unsigned char*)(st + KA_R * 2);  // [R][BR] with dropout
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, h = lane & 1;
  float* S = sb + warp * 32 * KA_SS;
  float* T = S + 16 * KA_SS;
  TM* P = pb + warp * 16 * KA_PS;
  const long long groups = (a.s + KA_BR - 1) / KA_BR, tiles = (a.l + KA_R - 1) / KA_R;
  const long long width = a.l * a.e + a.s * a.e + a.s * a.ev;
  const long long b = blockIdx.x / groups, g = groups - 1 - blockIdx.x % groups;  // the entry's last block first
  const long long j0 = g * KA_BR, jw = j0 + warp * 16, j = jw + (lane >> 1);
  const bool live = j < a.s, idle = jw >= a.s;
  kiln_frag_a vf[KA_EVP / 16];
  mma_load_tile(kb, KA_QS, a.k, b, a.s, j0, (int)a.e, KA_EP, KA_BR);
  mma_stage_rows<KA_EVP / 16>(vf, P, a.v, b, a.s, jw, (int)a.ev, lane);
  long long batch_off = 0;
#if KA_MASK
  batch_off = mask_offset(a, b);
#endif
  float dk[KA_EP / 16][8], dv[KA_EVP / 16][8];
  for (int c = 0; c < KA_EP / 16; ++c)
    for (int u = 0; u < 8; ++u) dk[c][u] = 0;
  for (int c = 0; c < KA_EVP / 16; ++c)
    for (int u = 0; u < 8; ++u) dv[c][u] = 0;
  long long first = 0;
#if KA_CAUSAL
  first = j0;  // queries before the block's first key see none of its keys
#endif
  for (long long r0 = first; r0 < a.l; r0 += KA_R) {
    __syncthreads();
    mma_load_tile(qt, KA_QS, a.q, b, a.l, r0, (int)a.e, KA_EP);
    mma_load_tile(gt, KA_VS, a.grad, b, a.l, r0, (int)a.ev, KA_EVP);
    for (int u = threadIdx.x; u < KA_R * 2; u += blockDim.x)
      st[u] = r0 + u / 2 < a.l ? a.stats[(b * a.l + r0) * 2 + u] : 0.f;
#if KA_DROPOUT
    drop_tile(a, b, r0, KA_R, j0, KA_BR, keep);
#endif
    __syncthreads();
    if (idle || (KA_CAUSAL && r0 + KA_R - 1 < jw)) {  // no query of the tile sees the warp's keys
      for (int t = 0; t < KA_H; ++t) P[(lane >> 1) * KA_PS + h * KA_H + t] = (TM)0;
    } else {
      mma_dots<KA_EP / 16>(S, nullptr, kb + warp * 16 * KA_QS, KA_QS, qt, KA_QS);
      mma_dots<KA_EVP / 16>(T, vf, nullptr, 0, gt, KA_VS);
      __syncwarp();
      float ds[KA_H];
      for (int t = 0; t < KA_H; ++t) {
        const int col = h * KA_H + t;
        const long long i = r0 + col;
        float pd = 0;
        ds[t] = 0;
        if (live && i < a.l) {
          const float p = KA_EXP(masked_score(a, S[(lane >> 1) * KA_SS + col], batch_off + i * a.mask_row, i, j) - st[col * 2]);
          const float f = drop_of(a, keep, col * KA_BR + (int)(j - j0));
          pd = p * f;
          ds[t] = p * (f * T[(lane >> 1) * KA_SS + col] - st[col * 2 + 1]) * (float)a.scale;
        }
        P[(lane >> 1) * KA_PS + col] = KA_STORE(pd);
      }
      __syncwarp();
      mma_add_products<KA_EVP / 16>(dv, 1.f, P, gt, KA_VS, S, lane);
      for (int t = 0; t < KA_H; ++t) P[(lane >> 1) * KA_PS + h * KA_H + t] = KA_STORE(ds[t]);
      __syncwarp();
      mma_add_products<KA_EP / 16>(dk, 1.f, P, qt, KA_QS, S, lane);
    }
    // The key blocks that see this tile and add to its dq before this one: those after it.
    long long seen_by = groups - 1;
#if KA_CAUSAL
    seen_by = r0 / KA_BR < seen_by ? r0 / KA_BR : seen_by;
#endif
    const unsigned before = (unsigned)(seen_by - g);
    unsigned* turn = a.sems + b * tiles + r0 / KA_R;
    if (threadIdx.x == 0)
      while (kiln_load_acquire(turn) != before) {
      }
    __syncthreads();  // every warp's dS is in pb, and the tile's dq is this block's to add to
    for (int t = warp; t < (KA_R / 16) * (KA_EP / 16); t += KA_W) {
      const int m = t / (KA_EP / 16), n = t % (KA_EP / 16);
      kiln_frag_c c;
      kiln_mma_zero(c);
#pragma unroll
      for (int kk = 0; kk < KA_BR / 16; ++kk) {
        kiln_frag_a af;
        kiln_frag_b bf;
        kiln_mma_load_a_col(af, pb + kk * 16 * KA_PS + m * 16, KA_PS);
        kiln_mma_load_b_row(bf, kb + kk * 16 * KA_QS + n * 16, KA_QS);
        kiln_mma_at(c, af, bf);
      }
      kiln_mma_store(S, c, KA_SS);
      __syncwarp();
      const long long i = r0 + m * 16 + (lane >> 1);
      if (i < a.l)
        for (int u = 0; u < 8; ++u) {
          const int col = n * 16 + h * 8 + u;
          if (col >= a.e) continue;
          volatile float* acc = a.dq_acc + (b * a.l + i) * a.e + col;
          float x = S[(lane >> 1) * KA_SS + h * 8 + u];
          if (before > 0) x += *acc;
          if (g == 0) a.result[b * width + i * a.e + col] = KA_STORE(x);  // the last to add
          else *acc = x;
        }
      __syncwarp();
    }
    __syncthreads();  // every warp's part of dq is stored before the release
    if (threadIdx.x == 0) kiln_store_release(turn, before + 1);
  }
  mma_store_rows<KA_EP / 16>(a.result + b * width + a.l * a.e, a.e, jw, a.s, (int)a.e, dk, 1.f, lane);
  mma_store_rows<KA_EVP / 16>(a.result + b * width + a.l * a.e + a.s * a.e, a.ev, jw, a.s, (int)a.ev, dv, 1.f, lane);
}
)";

}  // namespace

int block_rows() { return kWarpRows * kCudaBlock / 32; }

int64_t shared_bytes(const CudaAttention& k, int rows) {
  const bool backward = k.pass == CudaAttentionPass::Backward;
  const int64_t warps = kCudaBlock / 32, floats = backward ? 2 : 1;
  const int64_t tm = static_cast<int64_t>(dtype_size(k.dtype));  // the input dtype's bytes
  int64_t bytes = rows * (round16(k.e) + 8 + round16(k.ev) + 8) * tm;
  bytes += warps * (floats * kWarpRows * (rows + 4) * 4 + kWarpRows * (rows + 8) * tm);
  if (backward) bytes += block_rows() * (round16(k.e) + 8) * tm + rows * 2 * 4;  // the block's keys, the stats
  if (k.dropout) bytes += rows * block_rows();  // the keep flags of the block's rows, a byte each
  return bytes;
}

int tile_rows(const CudaAttention& k) {
  if (!k.mma || (k.dtype != DType::F16 && k.dtype != DType::BF16 && k.dtype != DType::F32) || k.e < 1 || k.ev < 1 ||
      k.e > 128 || k.ev > 128 || (k.pass != CudaAttentionPass::Forward && k.pass != CudaAttentionPass::Backward))
    return 0;
  const int64_t budget = k.pass == CudaAttentionPass::Backward ? kCudaAttentionBackwardShared : kCudaAttentionShared;
  for (int rows : {32, 16})
    if (shared_bytes(k, rows) <= budget) return rows;
  return 0;
}

std::string source(const CudaAttention& k) {
  std::string defines = fmt::format(R"(
#define KW_BF16 {}
#define KW_TF32 {}
#define KA_EP {}
#define KA_EVP {}
#define KA_QS (KA_EP + 8)
#define KA_VS (KA_EVP + 8)
#define KA_SS (KA_R + 4)
#define KA_PS (KA_R + 8)
#define KA_H (KA_R / 2)
#undef KA_BR
#define KA_BR {}
)",
                                    k.dtype == DType::BF16 ? 1 : 0,
                                    k.dtype != DType::F32 ? 0
                                    : k.tf32              ? 2
                                                          : 1,
                                    round16(k.e), round16(k.ev), block_rows());
  return defines + kFragments + (k.pass == CudaAttentionPass::Forward ? kForward : kBackward);
}

}  // namespace kiln::codegen::attention_mma
