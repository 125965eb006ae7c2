// runtime/random.cpp -- Philox 4x32-10 random numbers. Element i of a draw uses counter
// (offset + i) under key (seed), so the stream is the same on any device and any number of
// threads, and a draw of n elements advances the offset by n.
#include <atomic>
#include <cmath>
#include <numeric>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/parallel.h"
#include "runtime/recorder.h"

namespace kiln {
namespace {

struct Philox {
  uint32_t c[4];
};

inline void mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = uint64_t{a} * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

Philox philox(uint64_t counter, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, &hi0, &lo0);
    mulhilo(0xCD9E8D57u, c2, &hi1, &lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

struct Generator {
  std::atomic<uint64_t> seed{0x5eed};
  std::atomic<uint64_t> offset{0};
};
Generator& gen() {
  static Generator g;
  return g;
}

// Reserves n counters; returns (seed, first counter).
std::pair<uint64_t, uint64_t> reserve(int64_t n) {
  // A draw while tracing would become a constant, replayed on every call: refuse it rather
  // than silently repeat the same "random" numbers.
  KILN_CHECK(!active_recorder(),
             "random: drawing random numbers inside a traced function is not supported yet (the "
             "trace would replay one draw on every call); draw outside and pass the tensor in, "
             "e.g. a dropout mask");
  return {gen().seed.load(), gen().offset.fetch_add(static_cast<uint64_t>(n))};
}

inline double uniform53(const Philox& r) {  // [0, 1) with 53 random bits
  uint64_t bits = (uint64_t{r.c[0]} << 21) ^ (r.c[1] >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
}

// Fills a fresh f64 tensor with fn(philox(counter_i)) and converts it to dtype.
template <class F> Tensor draw(const Dims& shape, DType dtype, F fn) {
  Tensor t = empty(shape, DType::F64);
  int64_t n = t.numel();
  auto reserved = reserve(n);  // not a structured binding: clang 14 can't capture those
  uint64_t seed = reserved.first, base = reserved.second;
  double* p = t.data<double>();
  parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = fn(philox(base + static_cast<uint64_t>(i), seed));
  });
  return t.to(dtype);
}

}  // namespace

void manual_seed(uint64_t seed) {
  gen().seed.store(seed);
  gen().offset.store(0);
}

Tensor rand(const Dims& shape, DType dtype) {
  KILN_CHECK(is_float(dtype), "rand: dtype must be a float type, got {}", dtype_name(dtype));
  // Keep only as many bits as the dtype's significand holds: rounding 53 bits to nearest would
  // turn values just below 1 into 1.
  int bits = dtype == DType::F64 ? 53 : dtype == DType::F32 ? 24 : dtype == DType::F16 ? 11 : 8;
  double scale = std::ldexp(1.0, bits);
  return draw(shape, dtype,
              [scale](const Philox& r) { return std::floor(uniform53(r) * scale) / scale; });
}

Tensor randn(const Dims& shape, DType dtype) {
  KILN_CHECK(is_float(dtype), "randn: dtype must be a float type, got {}", dtype_name(dtype));
  return draw(shape, dtype, [](const Philox& r) {
    // Box-Muller on two independent uniforms; 1 - u keeps the log finite.
    double u1 = 1.0 - static_cast<double>(r.c[2]) * 0x1p-32;
    double u2 = uniform53(r);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
}

Tensor randint(int64_t low, int64_t high, const Dims& shape, DType dtype) {
  KILN_CHECK(low < high, "randint: low ({}) must be below high ({})", low, high);
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);  // may exceed 2^63
  Tensor t = empty(shape, DType::I64);
  int64_t n = t.numel();
  auto [seed, base] = reserve(n);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    Philox r = philox(base + static_cast<uint64_t>(i), seed);
    uint64_t bits = (uint64_t{r.c[0]} << 32) | r.c[1];
    p[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range);
  }
  return t.to(dtype);
}

Tensor bernoulli(const Dims& shape, double prob, DType dtype) {
  KILN_CHECK(prob >= 0 && prob <= 1, "bernoulli: p must be in [0, 1], got {}", prob);
  return draw(shape, dtype, [prob](const Philox& r) { return uniform53(r) < prob ? 1.0 : 0.0; });
}

Tensor bernoulli(const Tensor& p) {
  KILN_CHECK(p.defined() && is_float(p.dtype()), "bernoulli: p must be a float tensor, got {}",
             p.defined() ? p.type().str() : "undefined");
  Tensor u = rand(p.shape(), DType::F64);
  return lt(u, p.to(DType::F64)).to(p.dtype());
}

Tensor randperm(int64_t n) {
  KILN_CHECK(n >= 0 && n <= (int64_t{1} << 40), "randperm: n must be in [0, 2^40], got {}", n);
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  auto [seed, base] = reserve(n);
  for (int64_t i = n - 1; i > 0; --i) {
    Philox r = philox(base + static_cast<uint64_t>(i), seed);
    uint64_t bits = (uint64_t{r.c[0]} << 32) | r.c[1];
    std::swap(v[i], v[bits % static_cast<uint64_t>(i + 1)]);
  }
  return from_vector(v);
}

}  // namespace kiln
