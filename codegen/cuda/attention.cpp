// codegen/cuda/attention.cpp -- the fused attention kernels' CUDA C (see attention.h). The
// kernel text is fixed; the dtype, head dims, tile rows and options come in as #defines.
#include "codegen/cuda/attention.h"

#include <fmt/format.h>

#include <algorithm>

#include "codegen/cuda/attention_mma.h"
#include "codegen/cuda/emit.h"
#include "codegen/cuda/random.h"
#include "runtime/check.h"

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

// Shared memory in compute-type elements: per tile row, and for the rest.
struct SharedNeed {
  int64_t per_row, fixed;
};
SharedNeed need(const CudaAttention& k) {
  const int64_t w = cuda_attention_warps(), e = head_class(k.e), ev = head_class(k.ev);
  switch (k.pass) {
    case CudaAttentionPass::Forward: return {(e + 1) + ev, w * e + w * 32};
    case CudaAttentionPass::Queries: return {(e + 1) + (ev + 1), w * e + w * ev + w * 32};
    case CudaAttentionPass::Keys: return {(e + 1) + (ev + 1) + 2, w * e + w * ev + 2 * w * 32};
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
};

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
// The dropout's factor of weight (b, i, j): rand's f32 value (b * L + i) * S + j below 1 - p.
__device__ __forceinline__ C drop_factor(const Args& a, long long b, long long i, long long j) {
#if KA_DROPOUT
  const unsigned long long idx = (unsigned long long)((b * a.l + i) * a.s + j);
  unsigned w[4];
  kiln_philox((unsigned long long)a.state[0], (unsigned long long)a.state[1] + idx / 4, w);
  const float u = (float)(w[idx % 4] >> 8) * 0x1p-24f;
  return u < (float)a.keep_below ? (C)a.drop_scale : (C)0;
#else
  (void)a; (void)b; (void)i; (void)j;
  return (C)1;
#endif
}
// Lane j's dot product of the warp's row (row, dim n) with row j of a tile (stride n + 1).
__device__ __forceinline__ C tile_dot(const C* row, const C* tile, int lane, int n) {
  C dot = 0;
  for (int c = 0; c < n; ++c) dot += row[c] * tile[lane * (n + 1) + c];
  return dot;
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
// the end.
__device__ __forceinline__ void load_tile(C* t, int ts, const TM* x, long long b, long long rows, long long r0, int dim) {
  for (int u = threadIdx.x; u < KA_R * dim; u += blockDim.x) {
    const int r = u / dim, c = u % dim;
    t[r * ts + c] = r0 + r < rows ? KA_LOAD(x[(b * rows + r0 + r) * dim + c]) : (C)0;
  }
}
)";

const char* kForward = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  const int E = (int)a.e, EV = (int)a.ev;
  C* kt = kiln_shared<C>();     // [R][E + 1]
  C* vt = kt + KA_R * (E + 1);  // [R][EV]
  C* qs = vt + KA_R * EV;       // [W][E]
  C* ps = qs + KA_W * E;        // [W][32]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long groups = (a.l + KA_W - 1) / KA_W;
  for (long long task = blockIdx.x; task < a.batch * groups; task += gridDim.x) {
    const long long b = task / groups, i0 = task % groups * KA_W, i = i0 + warp;
    const bool live = i < a.l;
    __syncthreads();
    for (int c = lane; c < E; c += 32) qs[warp * E + c] = live ? KA_LOAD(a.q[(b * a.l + i) * E + c]) : (C)0;
    long long row_off = 0;
#if KA_MASK
    row_off = mask_offset(a, b) + (live ? i : 0) * a.mask_row;
#endif
    C m = -KA_INF, sum = 0, acc[KA_EVC];
    for (int c = 0; c < KA_EVC; ++c) acc[c] = 0;
    long long keys = a.s;
#if KA_CAUSAL
    keys = i0 + KA_W < a.s ? i0 + KA_W : a.s;
#endif
    for (long long j0 = 0; j0 < keys; j0 += KA_R) {
      __syncthreads();
      load_tile(kt, E + 1, a.k, b, a.s, j0, E);
      load_tile(vt, EV, a.v, b, a.s, j0, EV);
      __syncthreads();
      const long long j = j0 + lane;
      const C x = live && lane < KA_R && j < a.s ? masked_score(a, tile_dot(qs + warp * E, kt, lane, E), row_off, i, j) : -KA_INF;
      C corr;
      C p = online_softmax(x, m, sum, corr);
      if (p != (C)0) p *= drop_factor(a, b, i, j);
      ps[warp * 32 + lane] = p;
      __syncwarp();
      for (int cc = 0; cc < KA_EVC; ++cc) {
        const int c = lane + 32 * cc;
        C v = acc[cc] * corr;
        if (c < EV)
          for (int r = 0; r < KA_R; ++r) v += ps[warp * 32 + r] * vt[r * EV + c];
        acc[cc] = v;
      }
      __syncwarp();
    }
    if (live)
      for (int cc = 0; cc < KA_EVC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < EV) a.result[(b * a.l + i) * EV + c] = KA_STORE(m == -KA_INF ? KA_NAN : acc[cc] / sum);
      }
  }
}
)";

const char* kQueries = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  const int E = (int)a.e, EV = (int)a.ev;
  C* kt = kiln_shared<C>();            // [R][E + 1]
  C* vt = kt + KA_R * (E + 1);      // [R][EV + 1]
  C* qs = vt + KA_R * (EV + 1);     // [W][E]
  C* gs = qs + KA_W * E;            // [W][EV]
  C* ps = gs + KA_W * EV;           // [W][32]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long groups = (a.l + KA_W - 1) / KA_W, width = a.l * E + a.s * E + a.s * EV;
  for (long long task = blockIdx.x; task < a.batch * groups; task += gridDim.x) {
    const long long b = task / groups, i0 = task % groups * KA_W, i = i0 + warp;
    const bool live = i < a.l;
    __syncthreads();
    for (int c = lane; c < E; c += 32) qs[warp * E + c] = live ? KA_LOAD(a.q[(b * a.l + i) * E + c]) : (C)0;
    C d = 0;
    for (int c = lane; c < EV; c += 32) {
      const C g = live ? KA_LOAD(a.grad[(b * a.l + i) * EV + c]) : (C)0;
      gs[warp * EV + c] = g;
      if (live) d += g * KA_LOAD(a.out[(b * a.l + i) * EV + c]);
    }
    d = warp_sum(d);
    long long row_off = 0;
#if KA_MASK
    row_off = mask_offset(a, b) + (live ? i : 0) * a.mask_row;
#endif
    long long keys = a.s;
#if KA_CAUSAL
    keys = i0 + KA_W < a.s ? i0 + KA_W : a.s;
#endif
    // The log-sum-exp of the row's scores.
    C m = -KA_INF, sum = 0;
    for (long long j0 = 0; j0 < keys; j0 += KA_R) {
      __syncthreads();
      load_tile(kt, E + 1, a.k, b, a.s, j0, E);
      __syncthreads();
      const long long j = j0 + lane;
      const C x = live && lane < KA_R && j < a.s ? masked_score(a, tile_dot(qs + warp * E, kt, lane, E), row_off, i, j) : -KA_INF;
      C corr;
      online_softmax(x, m, sum, corr);
    }
    const C lse = m == -KA_INF ? -KA_INF : m + KA_LOG(sum);
    C acc[KA_EC];
    for (int c = 0; c < KA_EC; ++c) acc[c] = 0;
    for (long long j0 = 0; j0 < keys; j0 += KA_R) {
      __syncthreads();
      load_tile(kt, E + 1, a.k, b, a.s, j0, E);
      load_tile(vt, EV + 1, a.v, b, a.s, j0, EV);
      __syncthreads();
      const long long j = j0 + lane;
      C ds = 0;
      if (live && lane < KA_R && j < a.s) {
        const C dpd = tile_dot(gs + warp * EV, vt, lane, EV);
        const C p = KA_EXP(masked_score(a, tile_dot(qs + warp * E, kt, lane, E), row_off, i, j) - lse);
        ds = p * (drop_factor(a, b, i, j) * dpd - d) * (C)a.scale;
      }
      ps[warp * 32 + lane] = ds;
      __syncwarp();
      for (int cc = 0; cc < KA_EC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < E)
          for (int r = 0; r < KA_R; ++r) acc[cc] += ps[warp * 32 + r] * kt[r * (E + 1) + c];
      }
      __syncwarp();
    }
    if (live) {
      for (int cc = 0; cc < KA_EC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < E) a.result[b * width + i * E + c] = KA_STORE(acc[cc]);
      }
      if (lane == 0) {
        a.stats[(b * a.l + i) * 2] = lse;
        a.stats[(b * a.l + i) * 2 + 1] = d;
      }
    }
  }
}
)";

const char* kKeys = R"(
extern "C" __global__ __launch_bounds__(KA_THREADS) void kiln_kernel(const Args a) {
  const int E = (int)a.e, EV = (int)a.ev;
  C* qt = kiln_shared<C>();            // [R][E + 1]
  C* gt = qt + KA_R * (E + 1);      // [R][EV + 1]
  C* st = gt + KA_R * (EV + 1);     // [R][2]
  C* ks = st + KA_R * 2;               // [W][E]
  C* vs = ks + KA_W * E;            // [W][EV]
  C* ps = vs + KA_W * EV;           // [W][32]
  C* dss = ps + KA_W * 32;             // [W][32]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long groups = (a.s + KA_W - 1) / KA_W, width = a.l * E + a.s * E + a.s * EV;
  for (long long task = blockIdx.x; task < a.batch * groups; task += gridDim.x) {
    const long long b = task / groups, j0 = task % groups * KA_W, j = j0 + warp;
    const bool live = j < a.s;
    __syncthreads();
    for (int c = lane; c < E; c += 32) ks[warp * E + c] = live ? KA_LOAD(a.k[(b * a.s + j) * E + c]) : (C)0;
    for (int c = lane; c < EV; c += 32) vs[warp * EV + c] = live ? KA_LOAD(a.v[(b * a.s + j) * EV + c]) : (C)0;
    long long batch_off = 0;
#if KA_MASK
    batch_off = mask_offset(a, b);
#endif
    C dk[KA_EC], dv[KA_EVC];
    for (int c = 0; c < KA_EC; ++c) dk[c] = 0;
    for (int c = 0; c < KA_EVC; ++c) dv[c] = 0;
    long long first = 0;
#if KA_CAUSAL
    first = j0;  // queries before the block's first key see none of its keys
#endif
    for (long long r0 = first; r0 < a.l; r0 += KA_R) {
      __syncthreads();
      load_tile(qt, E + 1, a.q, b, a.l, r0, E);
      load_tile(gt, EV + 1, a.grad, b, a.l, r0, EV);
      for (int u = threadIdx.x; u < KA_R * 2; u += blockDim.x)
        st[u] = r0 + u / 2 < a.l ? a.stats[(b * a.l + r0) * 2 + u] : (C)0;
      __syncthreads();
      const long long i = r0 + lane;
      C pd = 0, ds = 0;
      if (live && lane < KA_R && i < a.l) {
        const C dpd = tile_dot(vs + warp * EV, gt, lane, EV);
        const C p = KA_EXP(masked_score(a, tile_dot(ks + warp * E, qt, lane, E), batch_off + i * a.mask_row, i, j) - st[lane * 2]);
        const C f = drop_factor(a, b, i, j);
        pd = p * f;
        ds = p * (f * dpd - st[lane * 2 + 1]) * (C)a.scale;
      }
      ps[warp * 32 + lane] = pd;
      dss[warp * 32 + lane] = ds;
      __syncwarp();
      for (int cc = 0; cc < KA_EVC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < EV)
          for (int r = 0; r < KA_R; ++r) dv[cc] += ps[warp * 32 + r] * gt[r * (EV + 1) + c];
      }
      for (int cc = 0; cc < KA_EC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < E)
          for (int r = 0; r < KA_R; ++r) dk[cc] += dss[warp * 32 + r] * qt[r * (E + 1) + c];
      }
      __syncwarp();
    }
    if (live) {
      for (int cc = 0; cc < KA_EC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < E) a.result[b * width + a.l * E + j * E + c] = KA_STORE(dk[cc]);
      }
      for (int cc = 0; cc < KA_EVC; ++cc) {
        const int c = lane + 32 * cc;
        if (c < EV) a.result[b * width + a.l * E + a.s * E + j * EV + c] = KA_STORE(dv[cc]);
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
)",
                     mem, wide ? "double" : "float", load, store, wide ? "exp" : "expf", wide ? "log" : "logf",
                     kCudaBlock, cuda_attention_warps(), rows, head_class(k.e) / 32, head_class(k.ev) / 32,
                     static_cast<int>(k.mask), k.causal ? 1 : 0,
                     k.dropout ? 1 : 0);
}

}  // namespace

int cuda_attention_warps() { return kCudaBlock / 32; }

int cuda_attention_block_rows(const CudaAttention& k) {
  return k.mma ? attention_mma::block_rows() : cuda_attention_warps();
}

int cuda_attention_tile_rows(const CudaAttention& k) {
  if (k.mma) return attention_mma::tile_rows(k);
  SharedNeed n = need(k);
  int64_t budget = kCudaAttentionShared / compute_bytes(k.dtype) - n.fixed;
  return budget < n.per_row ? 0 : static_cast<int>(std::min<int64_t>(32, budget / n.per_row));
}

int64_t cuda_attention_shared_bytes(const CudaAttention& k) {
  if (k.mma) return attention_mma::shared_bytes(k, cuda_attention_tile_rows(k));
  SharedNeed n = need(k);
  return (n.per_row * cuda_attention_tile_rows(k) + n.fixed) * compute_bytes(k.dtype);
}

std::string cuda_attention_kernel(const CudaAttention& k) {
  int rows = cuda_attention_tile_rows(k);
  KILN_CHECK(rows > 0 && k.e > 0 && k.ev > 0, "codegen: attention's CUDA kernels take head dims from 1 to about {}, got {} and {}",
             kCudaAttentionShared / compute_bytes(k.dtype) / 4, k.e, k.ev);
  std::string head = cuda_prelude() + (k.dropout ? cuda_philox_source() : std::string()) + defines(k, rows) + kHelpers;
  if (k.mma) return head + attention_mma::source(k, rows);
  const char* body = k.pass == CudaAttentionPass::Forward ? kForward : k.pass == CudaAttentionPass::Queries ? kQueries : kKeys;
  return head + body;
}

}  // namespace kiln::codegen
