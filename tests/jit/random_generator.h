// tests/jit/random_generator.h -- the generator behind random_program() (random_program.cpp
// makes values, random_steps.cpp picks ops): it builds a program step by step while running
// it eagerly, so every choice fits the shapes it has made so far.
#pragma once

#include <random>
#include <span>
#include <string>

#include "random_program.h"

namespace kiln::test {

inline constexpr int64_t kMaxNumel = 192;  // bound on a value's elements, to stay fast

class Generator {
 public:
  explicit Generator(uint64_t seed);
  Program make(int length);

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  double number() { return uniform(-8, 8) * 0.375; }
  template <class T> const T& pick(std::span<const T> items) {
    return items[static_cast<size_t>(uniform(0, static_cast<int>(items.size()) - 1))];
  }
  Dims random_shape(int max_rank);
  Dims random_axes(int64_t rank);

  /// Runs the step eagerly now, so later choices see its result's shape; returns its index.
  size_t add(const std::string& what, Step s);
  size_t new_arg(const Dims& shape, DType dtype);
  size_t captured(const Dims& shape, DType dtype);
  size_t literal(const Dims& shape, DType dtype);
  /// A value to combine with `x`: the result has x's shape, or one a little larger.
  size_t operand(const Tensor& x);
  /// A float value, most often a recent one.
  size_t input();

  void step();
  void view_step(size_t i, const Tensor& x);
  void reduce_step(size_t i, const Tensor& x);
  void shape_step(size_t i, const Tensor& x, int kind);

  std::mt19937_64 rng_;
  Program p_;
  std::vector<Tensor> vals_;
};

}  // namespace kiln::test
