// runtime/random.cpp -- Philox 4x32-10 random numbers. A draw's values come from counters
// offset, offset + 1, ... under key (seed): rand takes one 32-bit word per value (two for f64),
// randn one counter per value, randint and randperm 64 bits of one counter per value. So the
// stream is the same on any device and any number of threads, and a draw advances the offset by
// the counters it used. rand and randn are ops whose operand is that state (seed, offset), so a
// traced function draws as eagerly.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/ops/defs.h"
#include "runtime/ops/loops.h"
#include "runtime/parallel.h"
#include "runtime/recorder.h"
#include "runtime/simd/kernels.h"

namespace kiln {
namespace {

// One counter's four words, in a block of words the Philox kernel wrote word by word.
struct Philox {
  const uint32_t* w;
  int64_t stride;
  uint32_t operator[](int k) const { return w[k * stride]; }
};

// The 64 random bits of counter first + i (words 0 and 1), for i in [0, n), in blocks.
template <class F> void for_each_bits(uint64_t seed, uint64_t first, int64_t n, F fn) {
  constexpr int64_t kBlock = 256;
  uint32_t words[4 * kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    int64_t m = std::min(kBlock, n - i0);
    simd::kernels().philox(seed, first + static_cast<uint64_t>(i0), m, words);
    for (int64_t i = 0; i < m; ++i) fn(i0 + i, (uint64_t{words[i]} << 32) | words[m + i]);
  }
}

// The state is one (seed, offset) pair under one lock: with two atomics, a draw racing
// manual_seed could pair the new seed with the old offset (or the reverse).
struct Generator {
  std::mutex mu;
  uint64_t seed = 0x5eed;
  uint64_t offset = 0;
};
Generator& gen() {
  static Generator g;
  return g;
}

// Reserves n counters; returns (seed, first counter).
std::pair<uint64_t, uint64_t> reserve(int64_t n) {
  Generator& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  uint64_t first = g.offset;
  g.offset += static_cast<uint64_t>(n);
  return {g.seed, first};
}

// For draws that are no ops (randint, randperm): while tracing they would become a constant,
// replayed on every call, so they refuse.
std::pair<uint64_t, uint64_t> reserve_eagerly(int64_t n, const char* op) {
  KILN_CHECK(!active_recorder(),
             "{}: drawing inside a traced function is not supported (the trace would replay one "
             "draw on every call); draw outside and pass the tensor in (rand, randn, bernoulli "
             "and dropout do work inside a trace)",
             op);
  return reserve(n);
}

// The state operand of a draw of n numbers: random_state, which is a graph value while tracing.
Tensor state_for(int64_t n) { return random_state(n); }

inline double uniform53(const Philox& r) {  // [0, 1) with 53 random bits
  uint64_t bits = (uint64_t{r[0]} << 21) ^ (r[1] >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
}

// How many values of `dtype` one counter's 128 bits give: rand takes a 32-bit word per value
// (two for f64, which keeps 53 bits); randn one counter per value (Box-Muller reads three words).
int64_t per_counter(OpId id, DType dtype) {
  if (id == OpId::Randn) return 1;
  return dtype == DType::F64 ? 2 : 4;
}
int64_t counters_for(OpId id, DType dtype, int64_t n) {
  int64_t k = per_counter(id, dtype);
  return (n + k - 1) / k;
}

// Writes the n values of the draw whose state operand is `state` (seed, first counter) into p:
// value c * k + j is fn(the words of counter first + c, j).
template <class T, class F> void fill_draws(const Tensor& state, T* p, int64_t n, int k, F fn) {
  std::vector<int64_t> st = state.contiguous().to_vector<int64_t>();
  uint64_t seed = static_cast<uint64_t>(st[0]), base = static_cast<uint64_t>(st[1]);
  int64_t counters = (n + k - 1) / k;
  simd::PhiloxFn words = simd::kernels().philox;
  constexpr int64_t kBlock = 1024;
  parallel_for(0, (counters + kBlock - 1) / kBlock, 8, [&](int64_t b, int64_t e) {
    uint32_t w[4 * kBlock];
    for (int64_t blk = b; blk < e; ++blk) {
      int64_t c0 = blk * kBlock, m = std::min(kBlock, counters - c0);
      words(seed, base + static_cast<uint64_t>(c0), m, w);
      int64_t i0 = c0 * k, count = std::min(m * k, n - i0);
      T* out = p + i0;
      int64_t whole = count / k;  // counters whose k values all land
      for (int64_t c = 0; c < whole; ++c)
        for (int j = 0; j < k; ++j) out[c * k + j] = fn(Philox{w + c, m}, j);
      for (int64_t i = whole * k; i < count; ++i) out[i] = fn(Philox{w + whole, m}, static_cast<int>(i - whole * k));
    }
  });
}

// Draws into out, through a fresh buffer of T unless out already is one.
template <class T, class F> void draw_into(const Tensor& state, const Tensor& out, int k, F fn) {
  Tensor t = out.dtype() == dtype_of<T>() ? out : empty(out.shape(), dtype_of<T>());
  fill_draws(state, t.data<T>(), t.numel(), k, fn);
  if (t.impl() != out.impl()) copy_into(t, out);
}

// randn: Box-Muller on two independent uniforms; 1 - u keeps the log finite.
double normal(const Philox& r) {
  double u1 = 1.0 - static_cast<double>(r[2]) * 0x1p-32;
  double u2 = uniform53(r);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

TensorType draw_rule(OpId id, std::span<const Tensor> in, const Attrs& a) {
  KILN_CHECK(in.size() == 1 && in[0].dtype() == DType::I64 && in[0].shape() == Dims{2},
             "{}: the operand must be the generator state, i64[2] (seed, offset), got {}", op_name(id),
             in.empty() ? std::string("nothing") : in[0].type().str());
  KILN_CHECK(is_float(a.dtype), "{}: dtype must be a float type, got {}", op_name(id), dtype_name(a.dtype));
  for (int64_t d : a.shape) KILN_CHECK(d >= 0, "{}: shape {} has a negative size", op_name(id), shape_str(a.shape));
  return {a.dtype, a.shape, in[0].device()};
}

// rand keeps only as many bits as the dtype's significand holds (rounding more to nearest
// would turn values just below 1 into 1): the top 24 bits of a word for f32 (11 for f16, 8 for
// bf16, all exactly representable), 53 bits of two words for f64.
void rand_cpu(OpId, std::span<const Tensor> in, const Attrs& a, const Tensor& out) {
  if (a.dtype == DType::F64) {
    return draw_into<double>(in[0], out, 2, [](const Philox& r, int j) {
      uint64_t bits = (uint64_t{r[2 * j]} << 21) ^ (r[2 * j + 1] >> 11);
      return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
    });
  }
  int drop = a.dtype == DType::F32 ? 8 : a.dtype == DType::F16 ? 21 : 24;
  float unit = std::ldexp(1.0f, drop - 32);
  draw_into<float>(in[0], out, 4,
                   [drop, unit](const Philox& r, int j) { return static_cast<float>(r[j] >> drop) * unit; });
}

void randn_cpu(OpId, std::span<const Tensor> in, const Attrs&, const Tensor& out) {
  draw_into<double>(in[0], out, 1, [](const Philox& r, int) { return normal(r); });
}

// A draw on `device`: the state (16 bytes) moves there, and the device's kernel draws from it.
Tensor draw(OpId id, const Dims& shape, DType dtype, Device device) {
  Attrs a;
  a.shape = shape;
  a.dtype = dtype;
  Tensor state = state_for(counters_for(id, dtype, shape.product()));
  return apply(id, {device.is_cpu() ? state : state.to(device)}, a);
}

}  // namespace

const OpDef defs::Rand{
    .infer = draw_rule, .cpu = rand_cpu, .differentiable = false, .saves = 0, .attrs = kAttrShape | kAttrDType};
const OpDef defs::Randn{
    .infer = draw_rule, .cpu = randn_cpu, .differentiable = false, .saves = 0, .attrs = kAttrShape | kAttrDType};

Tensor Recorder::random_state(int64_t) { throw Error("random: this recorder does not trace random draws"); }

Tensor random_state(int64_t n) {
  KILN_CHECK(n >= 0, "random_state: negative draw size {}", n);
  // Traced, the state is the call's: an input bound anew each call, never this moment's value.
  if (Recorder* r = active_recorder()) return r->random_state(n);
  auto [seed, base] = reserve(n);
  return from_vector<int64_t>({static_cast<int64_t>(seed), static_cast<int64_t>(base)});
}

void set_random_state(const Tensor& state) {
  KILN_CHECK(state.defined() && state.dtype() == DType::I64 && state.shape() == Dims{2},
             "set_random_state: expected the i64[2] (seed, offset) that random_state(0) gives, got {}",
             state.defined() ? state.type().str() : std::string("an undefined tensor"));
  std::vector<int64_t> v = state.to_vector<int64_t>();
  Generator& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  g.seed = static_cast<uint64_t>(v[0]);
  g.offset = static_cast<uint64_t>(v[1]);
}

void manual_seed(uint64_t seed) {
  Generator& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  g.seed = seed;
  g.offset = 0;
}

Tensor rand(const Dims& shape, DType dtype, Device device) {
  KILN_CHECK(is_float(dtype), "rand: dtype must be a float type, got {}", dtype_name(dtype));
  return draw(OpId::Rand, shape, dtype, device);
}

Tensor randn(const Dims& shape, DType dtype, Device device) {
  KILN_CHECK(is_float(dtype), "randn: dtype must be a float type, got {}", dtype_name(dtype));
  return draw(OpId::Randn, shape, dtype, device);
}

// Drawn on the host and copied to `device`: the CPU's numbers everywhere, for the small integer
// tensors (labels, tokens, indices) it makes.
Tensor randint(int64_t low, int64_t high, const Dims& shape, DType dtype, Device device) {
  KILN_CHECK(low < high, "randint: low ({}) must be below high ({})", low, high);
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);  // may exceed 2^63
  Tensor t = empty(shape, DType::I64);
  int64_t n = t.numel();
  auto [seed, base] = reserve_eagerly(n, "randint");
  int64_t* p = t.data<int64_t>();
  for_each_bits(seed, base, n, [&](int64_t i, uint64_t bits) {
    p[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range);
  });
  return t.to(dtype).to(device);
}

Tensor bernoulli(const Dims& shape, double prob, DType dtype, Device device) {
  KILN_CHECK(prob >= 0 && prob <= 1, "bernoulli: p must be in [0, 1], got {}", prob);
  // 1 where an f32 uniform (24 bits) falls below prob.
  return (rand(shape, DType::F32, device) < prob).to(dtype);
}

Tensor bernoulli(const Tensor& p) {
  KILN_CHECK(p.defined() && is_float(p.dtype()), "bernoulli: p must be a float tensor, got {}",
             p.defined() ? p.type().str() : "undefined");
  Tensor u = rand(p.shape(), DType::F64, p.device());
  return lt(u, p.to(DType::F64)).to(p.dtype());
}

Tensor randperm(int64_t n) {
  KILN_CHECK(n >= 0 && n <= (int64_t{1} << 40), "randperm: n must be in [0, 2^40], got {}", n);
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  auto [seed, base] = reserve_eagerly(n, "randperm");
  // Fisher-Yates from the top: position i swaps with one at or below it, drawn by counter i.
  constexpr int64_t kBlock = 4096;
  std::vector<uint64_t> bits(kBlock);
  for (int64_t hi = n; hi > 1; hi -= kBlock) {
    int64_t lo = std::max<int64_t>(1, hi - kBlock);
    for_each_bits(seed, base + static_cast<uint64_t>(lo), hi - lo, [&](int64_t k, uint64_t b) { bits[k] = b; });
    for (int64_t i = hi - 1; i >= lo; --i) std::swap(v[i], v[bits[i - lo] % static_cast<uint64_t>(i + 1)]);
  }
  return from_vector(v);
}

}  // namespace kiln
