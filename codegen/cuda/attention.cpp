// codegen/cuda/attention.cpp -- the fused attention kernels' CUDA C (see attention.h). The
// kernel text is fixed; the dtype, head dims, tile rows and options come in as #defines.
#include "codegen/cuda/attention.h"

#include <fmt/format.h>

#include <algorithm>

#include "codegen/cuda/attention_mma.h"
#include "codegen/cuda/emit.h"
#include "codegen/cuda/random.h"
#include "runtime/check.h"
#include "runtime/ops/attention.h"

namespace kiln::codegen {
namespace {

int64_t compute_bytes(DType t) { return t == DType::F64 ? 8 : 4; }

// The head dims one kernel serves: a power of two of at least 32, its lanes' share of a row
// held in registers. (The dims themselves are arguments, so one kernel serves a whole class.)
int64_t head_class(int64_t d) {
  int64_t c = 32;
  while (c < d) c *= 2;
  return c;
}

// Rows a warp of the scalar kernels owns: two, whose dot products share each read of a tile's
// row; one in f64, whose rows would leave too little shared memory for tiles.
int64_t rows_per_warp(DType t) { return t == DType::F64 ? 1 : 2; }
// Elements of the compute type in 16 bytes.
int64_t piece(DType t) { return 16 / compute_bytes(t); }

// Shared memory in compute-type elements: per tile row, and for the rest (kForward's layout).
struct SharedNeed {
  int64_t per_row, fixed;
};
SharedNeed need(const CudaAttention& k) {
  const int64_t wq = cuda_attention_warps() * rows_per_warp(k.dtype);
  const int64_t es = head_class(k.e) + piece(k.dtype), vs = head_class(k.ev) + piece(k.dtype);
  // With dropout, a tile row's keep flags for the block's rows: a byte each.
  const int64_t flags = k.dropout ? (wq + compute_bytes(k.dtype) - 1) / compute_bytes(k.dtype) : 0;
  switch (k.pass) {
    case CudaAttentionPass::Forward: return {es + vs + wq + flags, wq * es};
    case CudaAttentionPass::Queries: return {es + vs + wq + flags, wq * (es + vs)};
    case CudaAttentionPass::Keys: return {es + vs + 2 + 2 * wq + flags, wq * (es + vs)};
    case CudaAttentionPass::Rows: return {0, 0};
    case CudaAttentionPass::Backward: return {1, kCudaAttentionShared};  // the tensor-core form's alone
  }
  return {1, 0};
}

const char* kHelpers = R"(
struct Args {
  long long batch, l, s, e, ev;
  const TM *q, *k, *v, *out, *grad;
  const void* mask;
  long long mask_dims, mask_size[4], mask_stride[4], mask_row, mask_col;
  const long long* state;
  double scale, drop_scale, keep_below;
  TM* result;
  C* stats;
  TM* lse;              // Forward: where each row's log-sum-exp goes (or null); Rows: read from
  const TM* lse_grad;   // Rows: the log-sum-exp's gradient, the same layout (or null)
  float* dq_acc;        // Backward: dq summed over the key blocks so far
  unsigned* sems;       // Backward: per query tile, the key blocks that added to its dq
};
// Row r's log-sum-exp into (from) a packed result: one element, or two whose sum it is.
__device__ __forceinline__ void store_lse(const Args& a, long long r, C v) {
#if KA_LSE_W == 2
  const TM hi = KA_STORE(v);
  a.lse[2 * r] = hi;
  a.lse[2 * r + 1] = KA_STORE(v == -KA_INF ? (C)0 : v - KA_LOAD(hi));
#else
  a.lse[r] = KA_STORE(v);
#endif
}
__device__ __forceinline__ C load_lse(const TM* lse, long long r) {
#if KA_LSE_W == 2
  return KA_LOAD(lse[2 * r]) + KA_LOAD(lse[2 * r + 1]);
#else
  return KA_LOAD(lse[r]);
#endif
}

__device__ __forceinline__ C warp_max(C v) {
  for (int o = 16; o > 0; o >>= 1) {
    C u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}
__device__ __forceinline__ C warp_sum(C v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Where batch b's mask starts (its merged batch dims unravelled).
__device__ __forceinline__ long long mask_offset(const Args& a, long long b) {
  long long off = 0;
  for (int d = (int)a.mask_dims - 1; d >= 0; --d) {
    off += b % a.mask_size[d] * a.mask_stride[d];
    b /= a.mask_size[d];
  }
  return off;
}
// The score of query i and key j from their dot product: scaled, then causal and the mask.
__device__ __forceinline__ C masked_score(const Args& a, C dot, long long row_off, long long i, long long j) {
  C x = dot * (C)a.scale;
#if KA_CAUSAL
  if (j > i) x = -KA_INF;
#endif
#if KA_MASK == 1
  if (!((const unsigned char*)a.mask)[row_off + j * a.mask_col]) x = -KA_INF;
#elif KA_MASK == 2
  x += ((const C*)a.mask)[row_off + j * a.mask_col];
#endif
  (void)row_off; (void)i; (void)j;
  return x;
}
#if KA_DROPOUT
// The dropout's keep flags of queries [i0, i0 + rows) x keys [j0, j0 + cols) of batch b, as rand
// draws them (value (b L + i) S + j, four to a Philox block), into keep[(i - i0) * cols + j - j0]:
// the block's threads draw each Philox block the tile touches once and keep all four of its
// words. The caller syncs the block after (and before, when the flags were read).
__device__ void drop_tile(const Args& a, long long b, long long i0, int rows, long long j0, int cols, unsigned char* keep) {
  const int per = cols / 4 + 2;  // the most blocks a row's cols values span
  const long long limit = a.s - j0 < cols ? a.s - j0 : cols;
  for (int t = threadIdx.x; t < rows * per; t += blockDim.x) {
    const int r = t / per;
    if (i0 + r >= a.l) continue;
    const unsigned long long base = (unsigned long long)((b * a.l + i0 + r) * a.s + j0), blk = base / 4 + t % per;
    if (blk * 4 >= base + limit) continue;
    unsigned w[4];
    kiln_philox((unsigned long long)a.state[0], (unsigned long long)a.state[1] + blk, w);
    for (int k = 0; k < 4; ++k) {
      const unsigned long long idx = blk * 4 + k;
      if (idx >= base && idx < base + limit)
        keep[r * cols + (int)(idx - base)] = (float)(w[k] >> 8) * 0x1p-24f < (float)a.keep_below ? 1 : 0;
    }
  }
}
#endif
// The dropout's factor of a weight whose flag drop_tile put at keep[at] (1 without dropout).
__device__ __forceinline__ C drop_of(const Args& a, const unsigned char* keep, int at) {
#if KA_DROPOUT
  return keep[at] ? (C)a.drop_scale : (C)0;
#else
  (void)a; (void)keep; (void)at;
  return (C)1;
#endif
}
// One tile of the online softmax: the running max m and sum take the lanes' scores x. Returns
// the lane's weight exp(x - m) under the new max; corr rescales what was summed before.
__device__ __forceinline__ C online_softmax(C x, C& m, C& sum, C& corr) {
  const C mt = warp_max(x);
  const C mn = mt > m ? mt : m;
  const C p = mn == -KA_INF ? (C)0 : KA_EXP(x - mn);
  corr = mn == -KA_INF ? (C)0 : KA_EXP(m - mn);
  sum = sum * corr + warp_sum(p);
  m = mn;
  return p;
}
// Rows [r0, r0 + KA_R) of x [rows, dim] (of batch b) into tile t with row stride ts; zeros past
// the end and in columns [dim, padded).
__device__ __forceinline__ void load_tile(C* t, int ts, const TM* x, long long b, long long rows, long long r0, int dim, int padded) {
  for (int u = threadIdx.x; u < KA_R * padded; u += blockDim.x) {
    const int r = u / padded, c = u % padded;
    t[r * ts + c] = r0 + r < rows && c < dim ? KA_LOAD(x[(b * rows + r0 + r) * dim + c]) : (C)0;
  }
}
// The warp's KA_Q rows of x [rows, dim] from r0 into rs (row stride ts), zeros past the ends.
__device__ __forceinline__ void load_rows(C* rs, int ts, const TM* x, long long b, long long rows, long long r0, int dim, int padded, int lane) {
  for (int u = lane; u < KA_Q * padded; u += 32) {
    const int q = u / padded, c = u % padded;
    rs[q * ts + c] = r0 + q < rows && c < dim ? KA_LOAD(x[(b * rows + r0 + q) * dim + c]) : (C)0;
  }
}
// 16 bytes of a row in shared memory, and one key's (query's) values for the warp's KA_Q rows.
struct alignas(16) Piece { C x[KA_VW]; };
struct alignas(KA_Q * sizeof(C)) Rows { C x[KA_Q]; };
// out[q]: the dot product of the warp's row q (rows, stride rs) with the lane's tile row t,
// `pieces` 16-byte pieces each; the tile's piece is read once for all KA_Q rows. Each sum runs
// over the columns in order, zeros past the head dim.
__device__ __forceinline__ void dots(C* out, const C* rows, int rs, const C* t, int pieces) {
#pragma unroll
  for (int q = 0; q < KA_Q; ++q) out[q] = 0;
  for (int c = 0; c < pieces; ++c) {
    const Piece tp = ((const Piece*)t)[c];
#pragma unroll
    for (int q = 0; q < KA_Q; ++q) {
      const Piece rp = ((const Piece*)(rows + q * rs))[c];
      for (int u = 0; u < KA_VW; ++u) out[q] += rp.x[u] * tp.x[u];
    }
  }
}
// acc[q][cc] += sum over the tile's rows r of w[r][q] * t[r][c], c = lane + 32 cc, for the N
// chunks of 32 columns below dim: the warp's weights w [KA_R][KA_Q], the tile t (stride ts).
template <int N>
__device__ __forceinline__ void add_weighted(C (*acc)[N], const C* w, const C* t, int ts, int dim, int lane) {
  for (int cc = 0; cc < N; ++cc) {
    const int c = lane + 32 * cc;
    if (c < dim)
      for (int r = 0; r < KA_R; ++r) {
        const Rows wr = ((const Rows*)w)[r];
        const C tv = t[r * ts + c];
#pragma unroll
        for (int q = 0; q < KA_Q; ++q) acc[q][cc] += wr.x[q] * tv;
      }
  }
}
)";

// The scalar kernels. A warp owns KA_Q rows (queries; keys in the Keys pass): the tile's row
// each lane reads for its dot products serves all of them, 16 bytes at a time. Rows in shared
// memory have a stride of their head dim rounded up to 8, plus 16 bytes, so the lanes' 16-byte
// reads of 8 consecutive rows fall in distinct banks.
const char* kForward = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  const int E = (int)a.e, EV = (int)a.ev, EP = (E + 7) & ~7, EVP = (EV + 7) & ~7, ES = EP + KA_VW, VS = EVP + KA_VW;
  C* kt = kiln_shared<C>();          // [R][ES]
  C* vt = kt + KA_R * ES;            // [R][VS]
  C* qs = vt + KA_R * VS;            // [W][Q][ES]
  C* ps = qs + KA_W * KA_Q * ES;     // [W][R][Q]
  unsigned char* keep = (unsigned char*)(ps + KA_W * KA_R * KA_Q);  // [BR][R] with dropout
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  C* mine = qs + warp * KA_Q * ES;
  C* weights = ps + warp * KA_R * KA_Q;
  const long long groups = (a.l + KA_BR - 1) / KA_BR;
  const unsigned tasks = (unsigned)(a.batch * groups);  // below 2^32 (cuda/attention.cpp checks)
  for (unsigned task = blockIdx.x; task < tasks; task += gridDim.x) {
    const long long b = task / groups, i0 = task % groups * KA_BR, iw = i0 + warp * KA_Q;
    __syncthreads();
    load_rows(mine, ES, a.q, b, a.l, iw, E, EP, lane);
    long long row_off[KA_Q];
    C m[KA_Q], sum[KA_Q], acc[KA_Q][KA_EVC];
#pragma unroll
    for (int q = 0; q < KA_Q; ++q) {
      row_off[q] = 0;
#if KA_MASK
      row_off[q] = mask_offset(a, b) + (iw + q < a.l ? iw + q : 0) * a.mask_row;
#endif
      m[q] = -KA_INF, sum[q] = 0;
      for (int c = 0; c < KA_EVC; ++c) acc[q][c] = 0;
    }
    long long keys = a.s;
#if KA_CAUSAL
    keys = i0 + KA_BR < a.s ? i0 + KA_BR : a.s;
#endif
    for (long long j0 = 0; j0 < keys; j0 += KA_R) {
      __syncthreads();
      load_tile(kt, ES, a.k, b, a.s, j0, E, EP);
      load_tile(vt, VS, a.v, b, a.s, j0, EV, EV);
#if KA_DROPOUT
      drop_tile(a, b, i0, KA_BR, j0, KA_R, keep);
#endif
      __syncthreads();
      const long long j = j0 + lane;
      const bool key = lane < KA_R && j < a.s;
      C dot[KA_Q];
      dots(dot, mine, ES, kt + (lane < KA_R ? lane : 0) * ES, EP / KA_VW);
#pragma unroll
      for (int q = 0; q < KA_Q; ++q) {
        const long long i = iw + q;
        const C x = key && i < a.l ? masked_score(a, dot[q], row_off[q], i, j) : -KA_INF;
        C corr;
        C p = online_softmax(x, m[q], sum[q], corr);
        if (p != (C)0) p *= drop_of(a, keep, (int)(i - i0) * KA_R + lane);
        if (lane < KA_R) weights[lane * KA_Q + q] = p;
        for (int c = 0; c < KA_EVC; ++c) acc[q][c] *= corr;
      }
      __syncwarp();
      add_weighted<KA_EVC>(acc, weights, vt, VS, EV, lane);
      __syncwarp();
    }
#pragma unroll
    for (int q = 0; q < KA_Q; ++q) {
      const long long i = iw + q;
      if (i < a.l)
        for (int cc = 0; cc < KA_EVC; ++cc) {
          const int c = lane + 32 * cc;
          if (c < EV) a.result[(b * a.l + i) * EV + c] = KA_STORE(m[q] == -KA_INF ? KA_NAN : acc[q][cc] / sum[q]);
        }
      if (a.lse && i < a.l && lane == 0) store_lse(a, b * a.l + i, m[q] == -KA_INF ? -KA_INF : m[q] + KA_LOG(sum[q]));
    }
  }
}
)";

// Per row of the backward: its log-sum-exp (the forward's) and D = rowsum(dO * out) less the
// log-sum-exp's gradient, a warp a row, into stats.
const char* kRows = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  const int lane = threadIdx.x % 32;
  const long long rows = a.batch * a.l;
  for (long long r = (long long)blockIdx.x * KA_W + threadIdx.x / 32; r < rows; r += (long long)gridDim.x * KA_W) {
    C d = 0;
    for (long long c = lane; c < a.ev; c += 32) d += KA_LOAD(a.grad[r * a.ev + c]) * KA_LOAD(a.out[r * a.ev + c]);
    d = warp_sum(d);
    if (lane == 0) {
      a.stats[r * 2] = load_lse(a.lse, r);
      a.stats[r * 2 + 1] = a.lse_grad ? d - load_lse(a.lse_grad, r) : d;
    }
  }
}
)";

const char* kQueries = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  const int E = (int)a.e, EV = (int)a.ev, EP = (E + 7) & ~7, EVP = (EV + 7) & ~7, ES = EP + KA_VW, VS = EVP + KA_VW;
  C* kt = kiln_shared<C>();          // [R][ES]
  C* vt = kt + KA_R * ES;            // [R][VS]
  C* qs = vt + KA_R * VS;            // [W][Q][ES]
  C* gs = qs + KA_W * KA_Q * ES;     // [W][Q][VS]
  C* ps = gs + KA_W * KA_Q * VS;     // [W][R][Q]
  unsigned char* keep = (unsigned char*)(ps + KA_W * KA_R * KA_Q);  // [BR][R] with dropout
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  C* mine_q = qs + warp * KA_Q * ES;
  C* mine_g = gs + warp * KA_Q * VS;
  C* weights = ps + warp * KA_R * KA_Q;
  const long long groups = (a.l + KA_BR - 1) / KA_BR, width = a.l * E + a.s * E + a.s * EV;
  const unsigned tasks = (unsigned)(a.batch * groups);  // below 2^32 (cuda/attention.cpp checks)
  for (unsigned task = blockIdx.x; task < tasks; task += gridDim.x) {
    const long long b = task / groups, i0 = task % groups * KA_BR, iw = i0 + warp * KA_Q;
    __syncthreads();
    load_rows(mine_q, ES, a.q, b, a.l, iw, E, EP, lane);
    load_rows(mine_g, VS, a.grad, b, a.l, iw, EV, EVP, lane);
    long long row_off[KA_Q];
    C d[KA_Q], lse[KA_Q], acc[KA_Q][KA_EC];
#pragma unroll
    for (int q = 0; q < KA_Q; ++q) {
      const long long i = iw + q;
      lse[q] = i < a.l ? a.stats[(b * a.l + i) * 2] : (C)0;
      d[q] = i < a.l ? a.stats[(b * a.l + i) * 2 + 1] : (C)0;
      row_off[q] = 0;
#if KA_MASK
      row_off[q] = mask_offset(a, b) + (i < a.l ? i : 0) * a.mask_row;
#endif
      for (int c = 0; c < KA_EC; ++c) acc[q][c] = 0;
    }
    long long keys = a.s;
#if KA_CAUSAL
    keys = i0 + KA_BR < a.s ? i0 + KA_BR : a.s;
#endif
    for (long long j0 = 0; j0 < keys; j0 += KA_R) {
      __syncthreads();
      load_tile(kt, ES, a.k, b, a.s, j0, E, EP);
      load_tile(vt, VS, a.v, b, a.s, j0, EV, EVP);
#if KA_DROPOUT
      drop_tile(a, b, i0, KA_BR, j0, KA_R, keep);
#endif
      __syncthreads();
      const long long j = j0 + lane;
      const bool key = lane < KA_R && j < a.s;
      C sd[KA_Q], gd[KA_Q];
      dots(sd, mine_q, ES, kt + (lane < KA_R ? lane : 0) * ES, EP / KA_VW);
      dots(gd, mine_g, VS, vt + (lane < KA_R ? lane : 0) * VS, EVP / KA_VW);
#pragma unroll
      for (int q = 0; q < KA_Q; ++q) {
        const long long i = iw + q;
        C ds = 0;
        if (key && i < a.l) {
          const C p = KA_EXP(masked_score(a, sd[q], row_off[q], i, j) - lse[q]);
          ds = p * (drop_of(a, keep, (int)(i - i0) * KA_R + lane) * gd[q] - d[q]) * (C)a.scale;
        }
        if (lane < KA_R) weights[lane * KA_Q + q] = ds;
      }
      __syncwarp();
      add_weighted<KA_EC>(acc, weights, kt, ES, E, lane);
      __syncwarp();
    }
#pragma unroll
    for (int q = 0; q < KA_Q; ++q) {
      const long long i = iw + q;
      if (i >= a.l) continue;
      for (int cc = 0; cc < KA_EC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < E) a.result[b * width + i * E + c] = KA_STORE(acc[q][cc]);
      }
    }
  }
}
)";

const char* kKeys = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  const int E = (int)a.e, EV = (int)a.ev, EP = (E + 7) & ~7, EVP = (EV + 7) & ~7, ES = EP + KA_VW, VS = EVP + KA_VW;
  C* qt = kiln_shared<C>();          // [R][ES]
  C* gt = qt + KA_R * ES;            // [R][VS]
  C* ks = gt + KA_R * VS;            // [W][Q][ES]
  C* vs = ks + KA_W * KA_Q * ES;     // [W][Q][VS]
  C* ps = vs + KA_W * KA_Q * VS;     // [W][R][Q]
  C* dss = ps + KA_W * KA_R * KA_Q;  // [W][R][Q]
  C* st = dss + KA_W * KA_R * KA_Q;  // [R][2]
  unsigned char* keep = (unsigned char*)(st + KA_R * 2);  // [R][BR] with dropout
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  C* mine_k = ks + warp * KA_Q * ES;
  C* mine_v = vs + warp * KA_Q * VS;
  C* weights = ps + warp * KA_R * KA_Q;
  C* dweights = dss + warp * KA_R * KA_Q;
  const long long groups = (a.s + KA_BR - 1) / KA_BR, width = a.l * E + a.s * E + a.s * EV;
  const unsigned tasks = (unsigned)(a.batch * groups);  // below 2^32 (cuda/attention.cpp checks)
  for (unsigned task = blockIdx.x; task < tasks; task += gridDim.x) {
    const long long b = task / groups, j0 = task % groups * KA_BR, jw = j0 + warp * KA_Q;
    __syncthreads();
    load_rows(mine_k, ES, a.k, b, a.s, jw, E, EP, lane);
    load_rows(mine_v, VS, a.v, b, a.s, jw, EV, EVP, lane);
    long long batch_off = 0;
#if KA_MASK
    batch_off = mask_offset(a, b);
#endif
    C dk[KA_Q][KA_EC], dv[KA_Q][KA_EVC];
#pragma unroll
    for (int q = 0; q < KA_Q; ++q) {
      for (int c = 0; c < KA_EC; ++c) dk[q][c] = 0;
      for (int c = 0; c < KA_EVC; ++c) dv[q][c] = 0;
    }
    long long first = 0;
#if KA_CAUSAL
    first = j0;  // queries before the block's first key see none of its keys
#endif
    for (long long r0 = first; r0 < a.l; r0 += KA_R) {
      __syncthreads();
      load_tile(qt, ES, a.q, b, a.l, r0, E, EP);
      load_tile(gt, VS, a.grad, b, a.l, r0, EV, EVP);
      for (int u = threadIdx.x; u < KA_R * 2; u += blockDim.x)
        st[u] = r0 + u / 2 < a.l ? a.stats[(b * a.l + r0) * 2 + u] : (C)0;
#if KA_DROPOUT
      drop_tile(a, b, r0, KA_R, j0, KA_BR, keep);
#endif
      __syncthreads();
      const long long i = r0 + lane;
      const bool query = lane < KA_R && i < a.l;
      C sd[KA_Q], gd[KA_Q];
      dots(sd, mine_k, ES, qt + (lane < KA_R ? lane : 0) * ES, EP / KA_VW);
      dots(gd, mine_v, VS, gt + (lane < KA_R ? lane : 0) * VS, EVP / KA_VW);
#pragma unroll
      for (int q = 0; q < KA_Q; ++q) {
        const long long j = jw + q;
        C pd = 0, ds = 0;
        if (query && j < a.s) {
          const C p = KA_EXP(masked_score(a, sd[q], batch_off + i * a.mask_row, i, j) - st[lane * 2]);
          const C f = drop_of(a, keep, lane * KA_BR + (int)(j - j0));
          pd = p * f;
          ds = p * (f * gd[q] - st[lane * 2 + 1]) * (C)a.scale;
        }
        if (lane < KA_R) weights[lane * KA_Q + q] = pd, dweights[lane * KA_Q + q] = ds;
      }
      __syncwarp();
      add_weighted<KA_EVC>(dv, weights, gt, VS, EV, lane);
      add_weighted<KA_EC>(dk, dweights, qt, ES, E, lane);
      __syncwarp();
    }
#pragma unroll
    for (int q = 0; q < KA_Q; ++q) {
      const long long j = jw + q;
      if (j >= a.s) continue;
      for (int cc = 0; cc < KA_EC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < E) a.result[b * width + a.l * E + j * E + c] = KA_STORE(dk[q][cc]);
      }
      for (int cc = 0; cc < KA_EVC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < EV) a.result[b * width + a.l * E + a.s * E + j * EV + c] = KA_STORE(dv[q][cc]);
      }
    }
  }
}
)";

// The #defines the kernel text reads.
std::string defines(const CudaAttention& k, int rows) {
  const char *mem, *load, *store;
  switch (k.dtype) {
    case DType::F32: mem = "float", load = "((C)(x))", store = "((float)(x))"; break;
    case DType::F64: mem = "double", load = "((C)(x))", store = "((double)(x))"; break;
    case DType::F16: mem = "unsigned short", load = "kiln_h2f(x)", store = "kiln_f2h((float)(x))"; break;
    case DType::BF16: mem = "unsigned short", load = "kiln_bf2f(x)", store = "kiln_f2bf((float)(x))"; break;
    default: throw Error(fmt::format("codegen: attention takes float dtypes, not {}", dtype_name(k.dtype)));
  }
  const bool wide = k.dtype == DType::F64;
  return fmt::format(R"(
typedef {0} TM;
typedef {1} C;
#define KA_LOAD(x) {2}
#define KA_STORE(x) {3}
#define KA_EXP {4}
#define KA_LOG {5}
#define KA_INF ((C)kiln_f32(0x7f800000u))
#define KA_NAN ((C)kiln_f32(0x7fc00000u))
#define KA_THREADS {6}
#define KA_W {7}
#define KA_R {8}
#define KA_EC {9}
#define KA_EVC {10}
#define KA_MASK {11}
#define KA_CAUSAL {12}
#define KA_DROPOUT {13}
#define KA_Q {14}
#define KA_VW {15}
#define KA_BR (KA_W * KA_Q)
#define KA_LSE_W {16}
)",
                     mem, wide ? "double" : "float", load, store, wide ? "exp" : "expf", wide ? "log" : "logf",
                     kCudaBlock, cuda_attention_warps(), rows, head_class(k.e) / 32, head_class(k.ev) / 32,
                     static_cast<int>(k.mask), k.causal ? 1 : 0, k.dropout ? 1 : 0, rows_per_warp(k.dtype),
                     piece(k.dtype), attention::lse_width(k.dtype));
}

}  // namespace

int cuda_attention_warps() { return kCudaBlock / 32; }

int cuda_attention_block_rows(const CudaAttention& k) {
  return k.mma ? attention_mma::block_rows() : cuda_attention_warps() * static_cast<int>(rows_per_warp(k.dtype));
}

int cuda_attention_tile_rows(const CudaAttention& k) {
  if (k.pass == CudaAttentionPass::Rows) return 1;  // (no tiles: a warp a row)
  if (k.mma) return attention_mma::tile_rows(k);
  SharedNeed n = need(k);
  int64_t budget = kCudaAttentionShared / compute_bytes(k.dtype) - n.fixed;
  return budget < n.per_row ? 0 : static_cast<int>(std::min<int64_t>(32, budget / n.per_row));
}

int64_t cuda_attention_shared_bytes(const CudaAttention& k) {
  if (k.mma) return attention_mma::shared_bytes(k, cuda_attention_tile_rows(k));
  if (k.pass == CudaAttentionPass::Rows) return 0;
  SharedNeed n = need(k);
  return (n.per_row * cuda_attention_tile_rows(k) + n.fixed) * compute_bytes(k.dtype);
}

std::string cuda_attention_kernel(const CudaAttention& k) {
  int rows = cuda_attention_tile_rows(k);
  KILN_CHECK(rows > 0 && k.e > 0 && k.ev > 0,
             "codegen: attention's CUDA kernels take head dims from 1 to about {}, got {} and {}",
             kCudaAttentionShared / compute_bytes(k.dtype) / 4, k.e, k.ev);
  std::string head = cuda_prelude() + (k.dropout ? cuda_philox_source() : std::string()) + defines(k, rows) + kHelpers;
  if (k.pass == CudaAttentionPass::Rows) return head + kRows;
  if (k.mma) return head + attention_mma::source(k);
  KILN_CHECK(k.pass != CudaAttentionPass::Backward, "codegen: attention's one-kernel backward is the tensor cores'");
  const char* body = k.pass == CudaAttentionPass::Forward   ? kForward
                     : k.pass == CudaAttentionPass::Queries ? kQueries
                                                            : kKeys;
  return head + body;
}

}  // namespace kiln::codegen
