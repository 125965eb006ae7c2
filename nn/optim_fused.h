// nn/optim_fused.h -- what the optimizers' update rules share (nn/sgd.cpp, nn/adam.cpp,
// nn/rmsprop_adagrad.cpp): the values a rule runs on, and the fused eager pass that runs it.
// Internal: only those files include it (the nn/*.h glob installs it, so it includes only
// installed headers).
//
// A rule is a template over the value it updates: eagerly it runs on lanes of floats in one
// fused pass over all parameters; traced (or for parameters that pass does not take) it runs
// on Tensors, so the trace records the same arithmetic and the jit fuses it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "runtime/api.h"
#include "runtime/parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kiln::optim::detail {

// ---- the values the rules run on ----------------------------------------------------------

// One SSE2 register of lanes: the fused loop runs the rules on these, so the arithmetic
// vectorizes and a rule's branches (on options and per-step flags) run once per block.
typedef float F4 __attribute__((vector_size(16)));
typedef double D2 __attribute__((vector_size(16)));

// Number: how a constant enters a value's arithmetic (rounded to the element type first, as a
// pointwise op's immediate is). Flag: a per-step condition (a bool, or a bool tensor traced).
template <class S> struct Traits;
template <> struct Traits<float> {
  using Number = float;
  using Flag = bool;
};
template <> struct Traits<double> {
  using Number = double;
  using Flag = bool;
};
template <> struct Traits<F4> {
  using Number = float;
  using Flag = bool;
};
template <> struct Traits<D2> {
  using Number = double;
  using Flag = bool;
};
template <> struct Traits<Tensor> {
  using Number = Scalar;
  using Flag = Tensor;
};

// sqrt and pow of plain values; Tensors find kiln::sqrt and kiln::pow by argument lookup.
inline float sqrt(float x) { return std::sqrt(x); }
inline double sqrt(double x) { return std::sqrt(x); }
#if defined(__SSE2__)
inline F4 sqrt(F4 x) { return F4(_mm_sqrt_ps(__m128(x))); }
inline D2 sqrt(D2 x) { return D2(_mm_sqrt_pd(__m128d(x))); }
#else
template <class V> V sqrt_lanes(V x) {
  for (size_t i = 0; i < sizeof(V) / sizeof(x[0]); ++i) x[i] = std::sqrt(x[i]);
  return x;
}
inline F4 sqrt(F4 x) { return sqrt_lanes(x); }
inline D2 sqrt(D2 x) { return sqrt_lanes(x); }
#endif
inline double pow(double a, double b) { return std::pow(a, b); }

// c ? a : b, per step.
template <class S> S pick(bool c, const S& a, const S& b) { return c ? a : b; }

// A momentum factor (f64[]) for the tensor path's arithmetic in `dtype`: f16 and bf16 updates
// compute in f32, so their factor stays f32, as the number it replaces was (0.9, not the
// half-precision 0.8999).
inline Tensor factor_in(const Tensor& f, DType dtype) {
  return f.to(dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype);
}
inline Tensor pick(const Tensor& c, const Tensor& a, const Tensor& b) { return where(c, a, b); }

// ---- the fused eager pass -----------------------------------------------------------------

// A parameter in the fused pass: its data, gradient and state, contiguous, of one dtype.
struct Slot {
  DType dtype;
  int64_t n;
  char* p;
  const char* g;
  char* state[3];  // null where the optimizer keeps less
};

// The parameters with gradients, split between the fused pass and the Tensor path.
struct Plan {
  std::vector<Slot> slots;
  std::vector<size_t> tensor_path;  // indices into params
  std::vector<Tensor> written;      // what the fused pass writes (for the version counters)
  std::vector<Tensor> keep;         // contiguous copies of strided gradients
};

// state0..2: the optimizer's per-parameter state (each may be empty).
Plan make_plan(const std::vector<Tensor>& params, const std::vector<Tensor>& state0, const std::vector<Tensor>& state1,
               const std::vector<Tensor>& state2 = {});

// Whether two slots' parameters share memory (one tensor listed twice): those are updated one
// after the other, as the Tensor ops would.
bool slots_overlap(const std::vector<Slot>& slots);

// Runs chunk(slot, begin, end) over all slots' elements as one range split across threads.
template <class Chunk> void for_each_chunk(std::span<const Slot> slots, const Chunk& chunk) {
  std::vector<int64_t> start(slots.size() + 1, 0);
  for (size_t i = 0; i < slots.size(); ++i) start[i + 1] = start[i] + slots[i].n;
  constexpr int64_t kGrain = 1 << 15;
  parallel_for(0, start.back(), kGrain, [&](int64_t b, int64_t e) {
    size_t i = std::upper_bound(start.begin(), start.end(), b) - start.begin() - 1;
    for (; i < slots.size() && start[i] < e; ++i) {
      int64_t lo = std::max(b, start[i]) - start[i], hi = std::min(e, start[i + 1]) - start[i];
      if (lo < hi) chunk(slots[i], lo, hi);
    }
  });
}

template <class V, class E> V load(const E* x) {
  V v;
  std::memcpy(&v, x, sizeof(V));
  return v;
}
template <class V, class E> void store(E* x, const V& v) { std::memcpy(x, &v, sizeof(V)); }

// Applies rule(p, g, s0, s1, s2) to elements [b, e) of a slot: blocks of lanes V, then the
// tail one element at a time (the same IEEE operations, so the same bits either way).
template <class E, class V, class Rule> void run_slot(const Slot& s, int64_t b, int64_t e, const Rule& rule) {
  constexpr int64_t W = sizeof(V) / sizeof(E);
  E* p = reinterpret_cast<E*>(s.p);
  const E* g = reinterpret_cast<const E*>(s.g);
  E* st[3] = {reinterpret_cast<E*>(s.state[0]), reinterpret_cast<E*>(s.state[1]), reinterpret_cast<E*>(s.state[2])};
  int64_t i = b;
  for (; i + W <= e; i += W) {
    V vp = load<V>(p + i), v[3];
    for (int k = 0; k < 3; ++k) v[k] = st[k] ? load<V>(st[k] + i) : V{};
    rule(vp, load<V>(g + i), v[0], v[1], v[2]);
    store(p + i, vp);
    for (int k = 0; k < 3; ++k)
      if (st[k]) store(st[k] + i, v[k]);
  }
  for (; i < e; ++i) {
    E xp = p[i], x[3];
    for (int k = 0; k < 3; ++k) x[k] = st[k] ? st[k][i] : E(0);
    rule(xp, g[i], x[0], x[1], x[2]);
    p[i] = xp;
    for (int k = 0; k < 3; ++k)
      if (st[k]) st[k][i] = x[k];
  }
}

// The fused pass: make_rule(k) gives the rule for one dtype's step numbers k (f32 or f64).
template <class K32, class K64, class MakeRule>
void run_fused(Plan& plan, const K32& k32, const K64& k64, const MakeRule& make_rule) {
  auto chunk = [&](const Slot& s, int64_t b, int64_t e) {
    if (s.dtype == DType::F32) run_slot<float, F4>(s, b, e, make_rule(k32));
    else run_slot<double, D2>(s, b, e, make_rule(k64));
  };
  if (slots_overlap(plan.slots)) {
    for (const Slot& s : plan.slots) for_each_chunk(std::span<const Slot>(&s, 1), chunk);
  } else {
    for_each_chunk(plan.slots, chunk);
  }
  for (const Tensor& t : plan.written) t.impl()->storage->bump_version();
}

}  // namespace kiln::optim::detail
