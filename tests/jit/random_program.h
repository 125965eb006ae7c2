// tests/jit/random_program.h -- random tensor programs from a seed, for differential tests of
// the tracer against eager mode.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "jit/trace.h"

namespace kiln::test {

/// One step of a program: computes a value from the arguments and the values before it.
using Step = std::function<Tensor(std::span<const Tensor> args, const std::vector<Tensor>& vals)>;

/// A straight-line program of public tensor ops. Its values are the results of its steps in
/// order; some steps return arguments, tensors captured from outside (named c0, c1, ...) or
/// literals made inside the step.
struct Program {
  std::vector<Tensor> args;  // example arguments
  jit::ParamNames captured;  // tensors the steps read from outside the program
  std::vector<Step> steps;
  std::vector<size_t> outputs;  // indices of the returned values
  std::string text;             // one line per step, for failure messages

  /// Runs every step eagerly (or under a tracer) and returns the outputs.
  std::vector<Tensor> run(std::span<const Tensor> arguments) const;
  /// New random arguments of the example arguments' types.
  std::vector<Tensor> fresh_args() const;
};

/// A program of about `length` steps mixing pointwise ops (with numbers and broadcasting),
/// reductions, views, matmul, cat, where, softmax, layer_norm and casts on small shapes.
Program random_program(uint64_t seed, int length = 10);

}  // namespace kiln::test
