// runtime/simd/kernels_isa.cpp -- the vectorized inner loops, built once per instruction set.
//
// CMake compiles this file with -DKILN_ISA=isa_scalar, isa_avx2 (-mavx2 -mfma -mf16c) and
// isa_avx512 (-mavx512f/bw/dq/vl). Everything here except fill() lives in an anonymous
// namespace and the formulas are instantiated only with the local Vec type, so no function
// compiled for a wider instruction set can be picked by the linker for baseline code.
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "runtime/ops/formulas.h"
#include "runtime/simd/kernels.h"

#if defined(KILN_ISA_AVX2) || defined(KILN_ISA_AVX512)
#include <immintrin.h>
#include <sleef.h>
#endif

namespace kiln::simd::KILN_ISA {
namespace {

#if defined(KILN_ISA_AVX512)
constexpr int kVectorBytes = 64;
#elif defined(KILN_ISA_AVX2)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 0;  // one lane: plain scalar code
#endif
template <class E> constexpr int kLanes = kVectorBytes ? kVectorBytes / int(sizeof(E)) : 1;

template <class E> struct IntOf;
template <> struct IntOf<float> { using type = int32_t; };
template <> struct IntOf<double> { using type = int64_t; };
template <> struct IntOf<int32_t> { using type = int32_t; };
template <> struct IntOf<int64_t> { using type = int64_t; };
template <> struct IntOf<uint8_t> { using type = int8_t; };

// A comparison result: all-ones lanes where true.
template <class E, int W> struct Mask {
  using M [[gnu::vector_size(W * sizeof(E))]] = typename IntOf<E>::type;
  M m;
  friend Mask operator&(Mask a, Mask b) { return {a.m & b.m}; }
  friend Mask operator|(Mask a, Mask b) { return {a.m | b.m}; }
};

// W lanes of E, over GCC's vector extension. W == 1 is plain scalar code.
template <class E, int W> struct Vec {
  using V [[gnu::vector_size(W * sizeof(E))]] = E;
  using M = typename Mask<E, W>::M;
  V v;
  Vec() = default;
  Vec(V x) : v(x) {}
  Vec(double c) : v(V{} + splat(c)) {}
  static E splat(double c) {  // via int64, so a negative constant wraps for u8 instead of UB
    if constexpr (std::is_floating_point_v<E>) return static_cast<E>(c);
    else return static_cast<E>(static_cast<int64_t>(c));
  }
  // From an element value (not via double: i64 keeps all its bits).
  static Vec broadcast(E c) {
    Vec r;
    r.v = V{} + c;
    return r;
  }
  static Vec load(const E* p) {
    Vec r;
    std::memcpy(&r.v, p, sizeof(V));
    return r;
  }
  void store(E* p) const { std::memcpy(p, &v, sizeof(V)); }
  E lane(int i) const { return v[i]; }

  friend Vec operator+(Vec a, Vec b) { return Vec(a.v + b.v); }
  friend Vec operator-(Vec a, Vec b) { return Vec(a.v - b.v); }
  friend Vec operator*(Vec a, Vec b) { return Vec(a.v * b.v); }
  friend Vec operator/(Vec a, Vec b) { return Vec(a.v / b.v); }
  friend Vec operator-(Vec a) { return Vec(-a.v); }
  friend Mask<E, W> operator==(Vec a, Vec b) { return {a.v == b.v}; }
  friend Mask<E, W> operator!=(Vec a, Vec b) { return {a.v != b.v}; }
  friend Mask<E, W> operator<(Vec a, Vec b) { return {a.v < b.v}; }
  friend Mask<E, W> operator<=(Vec a, Vec b) { return {a.v <= b.v}; }
  friend Mask<E, W> operator>(Vec a, Vec b) { return {a.v > b.v}; }
  friend Mask<E, W> operator>=(Vec a, Vec b) { return {a.v >= b.v}; }
};

template <class E, int W> Vec<E, W> select(Mask<E, W> m, Vec<E, W> a, Vec<E, W> b) {
  return Vec<E, W>(m.m ? a.v : b.v);
}

template <class E> constexpr bool kIsFloat = std::is_floating_point_v<E>;

// Applies a scalar function lane by lane (the one-lane build, and integer identities).
template <class E, int W, class Fn> Vec<E, W> lanewise(Vec<E, W> x, Fn fn) {
  Vec<E, W> r;
  for (int i = 0; i < W; ++i) r.v[i] = fn(x.v[i]);
  return r;
}
template <class E, int W, class Fn> Vec<E, W> lanewise2(Vec<E, W> x, Vec<E, W> y, Fn fn) {
  Vec<E, W> r;
  for (int i = 0; i < W; ++i) r.v[i] = fn(x.v[i], y.v[i]);
  return r;
}

template <class E, int W> Vec<E, W> fabs(Vec<E, W> x) {
  if constexpr (kIsFloat<E>) {  // clear the sign bit, so fabs(-0) is +0
    using M = typename Vec<E, W>::M;
    M bits = (M)x.v & ~(M{} + (typename IntOf<E>::type(1) << (sizeof(E) * 8 - 1)));
    return Vec<E, W>((typename Vec<E, W>::V)bits);
  } else {
    return select(x < Vec<E, W>(0), -x, x);
  }
}
// Integer inputs are already whole numbers.
template <class E, int W> Vec<E, W> floor(Vec<E, W> x) requires(!kIsFloat<E>) { return x; }
template <class E, int W> Vec<E, W> ceil(Vec<E, W> x) requires(!kIsFloat<E>) { return x; }
template <class E, int W> Vec<E, W> rint(Vec<E, W> x) requires(!kIsFloat<E>) { return x; }

// One-lane math: the C library. (Only the scalar build computes with one lane; wider builds
// take a row's tail through their vectors too, so these go unused there.)
// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_SCALAR_MATH(X)                   \
  X(exp, __builtin_expf, __builtin_exp)       \
  X(log, __builtin_logf, __builtin_log)       \
  X(log1p, __builtin_log1pf, __builtin_log1p) \
  X(expm1, __builtin_expm1f, __builtin_expm1) \
  X(sqrt, __builtin_sqrtf, __builtin_sqrt)    \
  X(sin, __builtin_sinf, __builtin_sin)       \
  X(cos, __builtin_cosf, __builtin_cos)       \
  X(tanh, __builtin_tanhf, __builtin_tanh)    \
  X(erf, __builtin_erff, __builtin_erf)       \
  X(floor, __builtin_floorf, __builtin_floor) \
  X(ceil, __builtin_ceilf, __builtin_ceil)    \
  X(rint, __builtin_rintf, __builtin_rint)
// clang-format on
#define KILN_DEFINE(name, ff, fd)                                 \
  [[maybe_unused]] inline Vec<float, 1> name(Vec<float, 1> x) {   \
    return lanewise(x, [](float a) { return ff(a); });            \
  }                                                               \
  [[maybe_unused]] inline Vec<double, 1> name(Vec<double, 1> x) { \
    return lanewise(x, [](double a) { return fd(a); });           \
  }
KILN_SCALAR_MATH(KILN_DEFINE)
#undef KILN_DEFINE
#undef KILN_SCALAR_MATH
[[maybe_unused]] inline Vec<float, 1> pow(Vec<float, 1> x, Vec<float, 1> y) {
  return lanewise2(x, y, [](float a, float b) { return __builtin_powf(a, b); });
}
[[maybe_unused]] inline Vec<double, 1> pow(Vec<double, 1> x, Vec<double, 1> y) {
  return lanewise2(x, y, [](double a, double b) { return __builtin_pow(a, b); });
}

// Vector math: SLEEF (1.0 ULP for the transcendentals), hardware sqrt.
#if defined(KILN_ISA_AVX2) || defined(KILN_ISA_AVX512)
#if defined(KILN_ISA_AVX512)
#define KILN_SLEEF_F(fn, acc) Sleef_##fn##f16##acc##avx512f
#define KILN_SLEEF_D(fn, acc) Sleef_##fn##d8##acc##avx512f
using F = Vec<float, 16>;
using D = Vec<double, 8>;
using MF = __m512;
using MD = __m512d;
inline F sqrt(F x) { return F((F::V)_mm512_sqrt_ps((MF)x.v)); }
inline D sqrt(D x) { return D((D::V)_mm512_sqrt_pd((MD)x.v)); }
#else
#define KILN_SLEEF_F(fn, acc) Sleef_##fn##f8##acc##avx2
#define KILN_SLEEF_D(fn, acc) Sleef_##fn##d4##acc##avx2
using F = Vec<float, 8>;
using D = Vec<double, 4>;
using MF = __m256;
using MD = __m256d;
inline F sqrt(F x) { return F((F::V)_mm256_sqrt_ps((MF)x.v)); }
inline D sqrt(D x) { return D((D::V)_mm256_sqrt_pd((MD)x.v)); }
#endif
// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_VEC_MATH(X) \
  X(exp, _u10)           \
  X(log, _u10)           \
  X(log1p, _u10)         \
  X(expm1, _u10)         \
  X(sin, _u10)           \
  X(cos, _u10)           \
  X(tanh, _u10)          \
  X(erf, _u10)           \
  X(floor, _)            \
  X(ceil, _)             \
  X(rint, _)
// clang-format on
#define KILN_DEFINE(fn, acc)                                           \
  inline F fn(F x) { return F((F::V)KILN_SLEEF_F(fn, acc)((MF)x.v)); } \
  inline D fn(D x) { return D((D::V)KILN_SLEEF_D(fn, acc)((MD)x.v)); }
KILN_VEC_MATH(KILN_DEFINE)
inline F pow(F x, F y) { return F((F::V)KILN_SLEEF_F(pow, _u10)((MF)x.v, (MF)y.v)); }
inline D pow(D x, D y) { return D((D::V)KILN_SLEEF_D(pow, _u10)((MD)x.v, (MD)y.v)); }
#undef KILN_DEFINE
#undef KILN_VEC_MATH
#undef KILN_SLEEF_F
#undef KILN_SLEEF_D
#endif

// ---- pointwise -------------------------------------------------------------------------

template <bool kNormalizeBool, class E, int W> void store_result(void* out, int64_t i, Vec<E, W> r) {
  if constexpr (kNormalizeBool) {  // bool computed as u8: any nonzero is true
    r = select(r != Vec<E, W>(0), Vec<E, W>(1), Vec<E, W>(0));
  }
  r.store(static_cast<E*>(out) + i);
}
template <bool kNormalizeBool, class E, int W> void store_result(void* out, int64_t i, Mask<E, W> m) {
  using B [[gnu::vector_size(W)]] = uint8_t;
  B b = __builtin_convertvector(m.m, B) & 1;
  std::memcpy(static_cast<uint8_t*>(out) + i, &b, W);
}

template <class Fm, class E, bool kNormalizeBool, size_t... K>
void pointwise_loop(int64_t n, void* out, const void* const* in, uint32_t broadcast, std::index_sequence<K...>) {
  constexpr int W = kLanes<E>;
  constexpr size_t N = sizeof...(K);
  // A broadcast operand reads lanes of a W-wide splat at index (i & 0): branch-free.
  alignas(64) E splat[N][W];
  const E* p[N];
  int64_t mask[N];
  for (size_t k = 0; k < N; ++k) {
    p[k] = static_cast<const E*>(in[k]);
    mask[k] = -1;
    if (broadcast >> k & 1) {
      for (int l = 0; l < W; ++l) splat[k][l] = p[k][0];
      p[k] = splat[k];
      mask[k] = 0;
    }
  }
  int64_t i = 0;
  if constexpr (W > 1) {
    using V = Vec<E, W>;
    for (; i + W <= n; i += W) store_result<kNormalizeBool>(out, i, Fm::f(V::load(p[K] + (i & mask[K]))...));
    if (i == n) return;
    // The tail goes through the same W-wide code (unused lanes repeat the last element): the
    // vector and scalar math functions may differ in the last bit, and an element's bits must
    // not depend on where it falls in a row (a transposed operand makes other rows).
    int64_t rest = n - i;
    alignas(64) E tail[N][W];
    const E* q[N];
    for (size_t k = 0; k < N; ++k) {
      if (!mask[k]) {
        q[k] = splat[k];
        continue;
      }
      for (int l = 0; l < W; ++l) tail[k][l] = p[k][i + std::min<int64_t>(l, rest - 1)];
      q[k] = tail[k];
    }
    using R = decltype(Fm::f(V::load(q[K])...));
    constexpr size_t kOut = std::is_same_v<R, V> ? sizeof(E) : 1;  // a mask stores bool bytes
    alignas(64) unsigned char result[W * sizeof(E)];
    store_result<kNormalizeBool>(result, 0, Fm::f(V::load(q[K])...));
    std::memcpy(static_cast<unsigned char*>(out) + i * kOut, result, static_cast<size_t>(rest) * kOut);
  } else {
    using S = Vec<E, 1>;
    for (; i < n; ++i) store_result<kNormalizeBool>(out, i, Fm::f(S::load(p[K] + (i & mask[K]))...));
  }
}

template <class Fm, class E, int Arity, bool kNormalizeBool = false>
void pointwise_kernel(int64_t n, void* out, const void* const* in, uint32_t broadcast) {
  pointwise_loop<Fm, E, kNormalizeBool>(n, out, in, broadcast, std::make_index_sequence<Arity>());
}

template <class Fm, int Arity> void fill_pointwise(PointwiseFn* row) {
  if constexpr ((Fm::kinds & fm::F) != 0) {
    row[int(DType::F32)] = &pointwise_kernel<Fm, float, Arity>;
    row[int(DType::F64)] = &pointwise_kernel<Fm, double, Arity>;
  }
  if constexpr ((Fm::kinds & fm::I) != 0) {
    row[int(DType::I32)] = &pointwise_kernel<Fm, int32_t, Arity>;
    row[int(DType::I64)] = &pointwise_kernel<Fm, int64_t, Arity>;
    row[int(DType::U8)] = &pointwise_kernel<Fm, uint8_t, Arity>;
  }
  if constexpr ((Fm::kinds & fm::B) != 0) {
    row[int(DType::Bool)] = &pointwise_kernel<Fm, uint8_t, Arity, true>;
  }
}

// ---- reductions ------------------------------------------------------------------------

template <ReduceKind K, class E> constexpr E identity() {
  return reduction_identity_as<E>(combine_of(K));  // runtime/op.h: the one rule
}
template <ReduceKind K, class T> T combine(T a, T b) {
  if constexpr (K == ReduceKind::Sum) return a + b;
  if constexpr (K == ReduceKind::Prod) return a * b;
  if constexpr (K == ReduceKind::Max) return fm::Maximum::f(a, b);
  if constexpr (K == ReduceKind::Min) return fm::Minimum::f(a, b);
}

// Reduces a block with four vector accumulators, then across lanes.
template <ReduceKind K, class E> E reduce_block(int64_t n, const E* x) {
  constexpr int W = kLanes<E>;
  using V = Vec<E, W>;
  V a0 = V::broadcast(identity<K, E>()), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    a0 = combine<K>(a0, V::load(x + i));
    a1 = combine<K>(a1, V::load(x + i + W));
    a2 = combine<K>(a2, V::load(x + i + 2 * W));
    a3 = combine<K>(a3, V::load(x + i + 3 * W));
  }
  for (; i + W <= n; i += W) a0 = combine<K>(a0, V::load(x + i));
  a0 = combine<K>(combine<K>(a0, a1), combine<K>(a2, a3));
  using S = Vec<E, 1>;
  S r = S::broadcast(identity<K, E>());
  for (int l = 0; l < W; ++l) r = combine<K>(r, S::broadcast(a0.lane(l)));
  for (; i < n; ++i) r = combine<K>(r, S::load(x + i));
  return r.lane(0);
}

// Sums `len` elements at each of kStreams places `stride` apart, two vector accumulators per
// place. Reading four places at once keeps more memory requests in flight than one sequential
// stream (a 16M-float sum read about 15% faster here).
constexpr int64_t kStreams = 4;

template <class E> E sum_streams(int64_t len, int64_t stride, const E* x) {
  constexpr int W = kLanes<E>;
  using V = Vec<E, W>;
  V a[kStreams][2];
  for (auto& pair : a) pair[0] = pair[1] = V::broadcast(E(0));
  for (int64_t j = 0; j < len; j += 2 * W)
    for (int64_t st = 0; st < kStreams; ++st) {
      a[st][0] = a[st][0] + V::load(x + st * stride + j);
      a[st][1] = a[st][1] + V::load(x + st * stride + j + W);
    }
  V v = ((a[0][0] + a[0][1]) + (a[1][0] + a[1][1])) + ((a[2][0] + a[2][1]) + (a[3][0] + a[3][1]));
  E r = 0;
  for (int l = 0; l < W; ++l) r += v.lane(l);
  return r;
}

template <ReduceKind K, class E> void reduce_row(int64_t n, const void* xv, void* accv) {
  const E* x = static_cast<const E*>(xv);
  E* acc = static_cast<E*>(accv);
  if constexpr (K == ReduceKind::Sum && kIsFloat<E>) {
    // Float sums add blocks in double, so the error stays near one block's. A block gives each
    // partial sum (reduce_block's 4 * W, sum_streams's 8 * W) 64 elements, at every vector
    // width. The row's first kStreams * part elements are read as four streams.
    constexpr int64_t kBlock = 256 * kLanes<E>, kStreamBlock = kBlock / 2;
    int64_t part = n / (kStreams * kStreamBlock) * kStreamBlock;
    double total = 0;
    for (int64_t i = 0; i < part; i += kStreamBlock) total += sum_streams(kStreamBlock, part, x + i);
    for (int64_t i = kStreams * part; i < n; i += kBlock)
      total += reduce_block<K>(n - i < kBlock ? n - i : kBlock, x + i);
    *acc = static_cast<E>(*acc + total);
  } else {
    using S = Vec<E, 1>;
    *acc = combine<K>(S::broadcast(*acc), S::broadcast(reduce_block<K>(n, x))).lane(0);
  }
}

template <ReduceKind K, class E>
void reduce_cols(int64_t rows, int64_t cols, const void* xv, int64_t row_stride, void* accv) {
  const E* x = static_cast<const E*>(xv);
  E* acc = static_cast<E*>(accv);
  if constexpr (K == ReduceKind::Sum && kIsFloat<E>) {
    // As in reduce_row: blocks of 64 rows summed in E, the blocks added in double (a million
    // rows of 0.1f added one by one in float are 1% off).
    constexpr int64_t kRows = 64, kCols = 256;
    if (rows > kRows) {
      for (int64_t j0 = 0; j0 < cols; j0 += kCols) {
        int64_t nc = cols - j0 < kCols ? cols - j0 : kCols;
        double total[kCols] = {};
        E part[kCols];
        for (int64_t i0 = 0; i0 < rows; i0 += kRows) {
          for (int64_t j = 0; j < nc; ++j) part[j] = E(0);
          int64_t m = rows - i0 < kRows ? rows - i0 : kRows;
          reduce_cols<K, E>(m, nc, x + i0 * row_stride + j0, row_stride, part);
          for (int64_t j = 0; j < nc; ++j) total[j] += part[j];
        }
        for (int64_t j = 0; j < nc; ++j) acc[j0 + j] = static_cast<E>(acc[j0 + j] + total[j]);
      }
      return;
    }
  }
  constexpr int W = kLanes<E>;
  int64_t j = 0;
  if constexpr (W > 1) {
    using V = Vec<E, W>;
    for (; j + W <= cols; j += W) {
      V a = V::load(acc + j);
      for (int64_t i = 0; i < rows; ++i) a = combine<K>(a, V::load(x + i * row_stride + j));
      a.store(acc + j);
    }
  }
  using S = Vec<E, 1>;
  for (; j < cols; ++j) {
    S a = S::load(acc + j);
    for (int64_t i = 0; i < rows; ++i) a = combine<K>(a, S::load(x + i * row_stride + j));
    a.store(acc + j);
  }
}

template <ReduceKind K> void fill_reduce(KernelTable& t) {
  t.reduce_row[int(K)][int(DType::F32)] = &reduce_row<K, float>;
  t.reduce_row[int(K)][int(DType::F64)] = &reduce_row<K, double>;
  t.reduce_row[int(K)][int(DType::I64)] = &reduce_row<K, int64_t>;
  t.reduce_cols[int(K)][int(DType::F32)] = &reduce_cols<K, float>;
  t.reduce_cols[int(K)][int(DType::F64)] = &reduce_cols<K, double>;
  t.reduce_cols[int(K)][int(DType::I64)] = &reduce_cols<K, int64_t>;
}

}  // namespace

// Philox 4x32-10, eight counters per 32-bit lane vector. A 32x32->64-bit product takes the
// even lanes and (shifted down) the odd lanes as 64-bit lanes, one multiply each (vpmuludq on
// x86); the halves are put back with shifts, masks and ors.
using U32x8 = uint32_t __attribute__((vector_size(32)));
using U64x4 = uint64_t __attribute__((vector_size(32)));

[[gnu::always_inline]] inline void mulhilo(const U32x8& x, uint32_t m, U32x8& hi, U32x8& lo) {
  const U64x4 low = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  U64x4 w = (U64x4)x;  // a vector cast reinterprets the bits
  U64x4 even = (w & low) * m, odd = (w >> 32) * m;
  hi = (U32x8)((even >> 32) | (odd & ~low));
  lo = (U32x8)((even & low) | (odd << 32));
}

void philox(uint64_t seed, uint64_t first, int64_t n, uint32_t* out) {
  constexpr int B = 8;
  const U32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t i = 0; i < n; i += B) {
    uint64_t start = first + static_cast<uint64_t>(i);
    U32x8 lo = static_cast<uint32_t>(start) + U32x8{}, c0 = lo + lane;
    // The high word carries where the low word wrapped (a true comparison is all ones: -1).
    U32x8 c1 = static_cast<uint32_t>(start >> 32) - (U32x8)(c0 < lo), c2 = {}, c3 = {};
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      U32x8 hi0, lo0, hi1, lo1;
      mulhilo(c0, 0xD2511F53u, hi0, lo0);
      mulhilo(c2, 0xCD9E8D57u, hi1, lo1);
      U32x8 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    int64_t m = std::min<int64_t>(B, n - i);
    if (m == B) {
      std::memcpy(out + i, &c0, sizeof c0);
      std::memcpy(out + n + i, &c1, sizeof c1);
      std::memcpy(out + 2 * n + i, &c2, sizeof c2);
      std::memcpy(out + 3 * n + i, &c3, sizeof c3);
    } else {
      for (int64_t j = 0; j < m; ++j) {
        out[i + j] = c0[j], out[n + i + j] = c1[j], out[2 * n + i + j] = c2[j], out[3 * n + i + j] = c3[j];
      }
    }
  }
}

void fill(KernelTable& t) {
  t.philox = philox;
#define OP(Name, name, arity, family) KILN_FILL_##family(Name, arity)
#define KILN_FILL_Pointwise(Name, arity) fill_pointwise<fm::Name, arity>(t.pointwise[int(OpId::Name)]);
#define KILN_FILL_Cast(Name, arity)
#define KILN_FILL_Reduce(Name, arity)
#define KILN_FILL_View(Name, arity)
#define KILN_FILL_Copy(Name, arity)
#define KILN_FILL_Other(Name, arity)
#include "runtime/ops.def"
#undef OP
  fill_reduce<ReduceKind::Sum>(t);
  fill_reduce<ReduceKind::Prod>(t);
  fill_reduce<ReduceKind::Max>(t);
  fill_reduce<ReduceKind::Min>(t);
}

}  // namespace kiln::simd::KILN_ISA
