// tests/ops/op_specs_creation.h -- the Specs of the ops that make a tensor from their attributes,
// not from operand values: iota, numel, and the random draws rand and randn.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/ops/op_specs_common.h"

namespace kiln::test {

// iota: 0..n-1 on the device of the case's one tensor (which only says where), directly and
// through arange's start and step. It has no operand whose dtype it could refuse: every dtype's
// cases give i64 positions.
template <> struct Spec<OpId::Iota> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto positions = [](int64_t start, int64_t n, int64_t step) {
      return [=](std::span<const Ref>) {
        Ref o = zeros_ref({n});
        for (int64_t i = 0; i < n; ++i) o.v[size_t(i)] = double(start + i * step);
        return o;
      };
    };
    auto direct = [&](std::string name, int64_t n) {
      return Case{std::move(name),
                  {zeros({1}, t)},
                  [n](std::span<const Tensor> in) {
                    Attrs a;
                    a.shape = {n};
                    a.device = in[0].device();
                    return apply(OpId::Iota, {}, a);
                  },
                  positions(0, n, 1)};
    };
    return {direct("empty", 0),
            direct("seven", 7),
            direct("past_a_block", 70001),
            {"arange_start_step",
             {zeros({1}, t)},
             [](std::span<const Tensor> in) { return arange(20, 3, -4).to(in[0].device()); },
             positions(20, 5, -4)}};
  }
};

// numel: a size as a number, on the host (moved to the case tensor's device, where a 0-d CPU
// tensor would meet it anyway); every dtype but bool.
template <> struct Spec<OpId::Numel> {
  static std::vector<DType> dtypes() {
    std::vector<DType> d;
    for (DType t : kAllDTypes)
      if (t != DType::Bool) d.push_back(t);
    return d;
  }
  static std::vector<Case> cases(DType t) {
    auto make = [t](std::string name, Dims shape) {
      double n = 1;
      for (int64_t d : shape) n *= double(d);
      return Case{std::move(name),
                  {zeros({1}, t)},
                  [shape, t](std::span<const Tensor> in) {
                    Attrs a;
                    a.shape = shape;
                    a.dtype = t;
                    return apply(OpId::Numel, {}, a).to(in[0].device());
                  },
                  [n](std::span<const Ref>) {
                    return Ref{{}, {n}, {}};
                  }};
    };
    return {make("product", {3, 4, 5}), make("empty", {2, 0}), make("scalar", {})};
  }
};

// ---- random draws: Philox 4x32-10 written out here, checked against Random123's known answer --
inline std::array<uint32_t, 4> philox_ref(uint64_t key, uint64_t counter) {
  uint32_t c[4] = {uint32_t(counter), uint32_t(counter >> 32), 0, 0};
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    uint32_t n[4] = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1, uint32_t(p0)};
    std::copy(n, n + 4, c);
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return {c[0], c[1], c[2], c[3]};
}
/// Draw i of rand (dtype t) or randn from state (seed, first counter), as runtime/random.cpp
/// documents the stream: rand keeps the top significand bits of one word (f64: 53 bits of
/// two), randn is Box-Muller on one counter's words.
inline double draw_ref(OpId id, DType t, uint64_t seed, uint64_t first, int64_t i) {
  if (id == OpId::Randn) {
    auto w = philox_ref(seed, first + uint64_t(i));
    double u1 = 1.0 - double(w[2]) * 0x1p-32;
    uint64_t bits = (uint64_t{w[0]} << 21) ^ (w[1] >> 11);
    double u2 = double(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  }
  if (t == DType::F64) {
    auto w = philox_ref(seed, first + uint64_t(i / 2));
    int j = int(i % 2);
    uint64_t bits = (uint64_t{w[2 * j]} << 21) ^ (w[2 * j + 1] >> 11);
    return double(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53;
  }
  int keep = t == DType::F32 ? 24 : t == DType::F16 ? 11 : 8;
  auto w = philox_ref(seed, first + uint64_t(i / 4));
  return std::ldexp(double(w[size_t(i % 4)] >> (32 - keep)), -keep);
}
inline std::vector<Case> draw_cases(OpId id, DType t) {
  auto make = [id, t](std::string name, Dims shape, int64_t seed, int64_t first) {
    return Case{std::move(name),
                {from_vector<int64_t>({seed, first}, {2})},
                [id, t, shape](std::span<const Tensor> in) {
                  Attrs a;
                  a.dtype = t, a.shape = shape;
                  return apply(id, {in[0]}, a);
                },
                [id, t, shape](std::span<const Ref> r) {
                  Ref o = zeros_ref(shape);
                  uint64_t seed = uint64_t(int64_t(r[0].v[0])), first = uint64_t(int64_t(r[0].v[1]));
                  for (int64_t i = 0; i < o.numel(); ++i) o.v[size_t(i)] = draw_ref(id, t, seed, first, i);
                  return o;
                }};
  };
  // A counter whose low word wraps inside the draw, and a draw that ends mid-counter.
  return {make("odd_size", {3, 7}, 1234, 17), make("low_word_wraps", {2, 1029}, 99, 0xfffffff0LL)};
}
template <> struct Spec<OpId::Rand> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return draw_cases(OpId::Rand, t); }
};
template <> struct Spec<OpId::Randn> {
  static std::vector<DType> dtypes() { return kFloatDTypes; }
  static std::vector<Case> cases(DType t) { return draw_cases(OpId::Randn, t); }
};

}  // namespace kiln::test
