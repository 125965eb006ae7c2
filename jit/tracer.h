// jit/tracer.h -- running a function on data-less tensors to record its graph.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "jit/trace.h"

namespace kiln::jit {

/// What one trace produced: the graph and how to bind it when it runs.
struct Trace {
  ir::Graph graph;
  size_t num_args = 0;         // graph.inputs[0..num_args) are the function's arguments
  std::vector<Tensor> params;  // live tensors bound to graph.params, in order
  /// (param index, position in graph.inputs): a gradient read by the function, bound from
  /// params[i].grad() at each call.
  std::vector<std::pair<size_t, size_t>> grad_inputs;
  /// (param index, position in graph.outputs): a gradient the function left in grad(), written
  /// back after each call.
  std::vector<std::pair<size_t, size_t>> grad_outputs;
  /// Param indices whose grad() the function dropped (zero_grad): cleared after each call.
  std::vector<size_t> grad_cleared;
  size_t num_results = 0;  // graph.outputs[0..num_results) are the function's
  /// Per param, a guard on grad() when a call starts: 1 defined, 0 undefined (as traced), -1
  /// either (the function replaced the gradient before reading it).
  std::vector<int8_t> grad_guard;
  /// The function called backward() (consuming its graph): a call runs untaped and fused, and
  /// its results carry no gradient history.
  bool ran_backward = false;
  /// The function draws random numbers (rand, randn, bernoulli, dropout): graph.inputs
  /// [rng_input] is the generator's state, bound at each call to random_state(rng_draws), so
  /// a call draws what the function would eagerly and advances the generator as much.
  int rng_input = -1;
  int64_t rng_draws = 0;
  /// A joint trace (trace_function with `differentiate`, of a function without side effects
  /// whose results need gradients): the function's backward was traced after it.
  /// graph.inputs[num_args + k] (after the generator's state when there is one) is the
  /// gradient of result diff_results[k]; the outputs after
  /// the results are the gradients of `wrt`'s tensors that the results reach.
  bool joint = false;
  std::vector<size_t> diff_results;
  struct Wrt {
    bool param;  // params[index], else argument index
    size_t index;
    int output;  // position in graph.outputs; -1: the results do not depend on it
  };
  std::vector<Wrt> wrt;
};

/// Traces fn on placeholders shaped like `inputs` (same dtypes, shapes, requires-grad). With
/// `differentiate`, a function that only computes (no in-place writes to captured tensors, no
/// backward() or gradient changes of its own) and returns results that need gradients is
/// traced together with its backward (Trace::joint): the eager engine runs each op's vjp on
/// the tracer's tensors.
Trace trace_function(const TensorFn& fn, std::span<const Tensor> inputs, const std::string& name,
                     const ParamNames& names = {}, bool differentiate = false);

/// What jit::save reads from a Function's most recently used plan.
struct SavedPlan {
  ir::Graph graph;                     // after the optimization passes, before taping and fusion
  Trace trace;                         // its bindings (trace.graph is empty)
  std::vector<Tensor> example_inputs;  // placeholders of the signature it was traced for
  bool grad_mode = false;
  TensorFn fn;  // to trace it again for other sizes
  ParamNames names;
  std::string name;
};
struct FunctionAccess {
  /// Throws when the function has no plan yet, or its last is a differentiable forward.
  static SavedPlan last_plan(const Function& f);
  /// A function for an eager composite (runtime/composite_fusion.h): `fn` is pure and reads
  /// only its arguments. Its plans never replay as CUDA graphs; a differentiable call's node
  /// keeps its arguments (so the partition saves them for free) and, under create_graph, runs
  /// `fn` again op by op and differentiates that, recorded.
  static Function composite(TensorFn fn, std::string name);
};

/// The statistics of the eager composite run under `key` (runtime/composite_fusion.h); all
/// zero before its first compiled call.
Stats composite_stats(const std::string& key);

/// Fills in file:line of the nodes' source locations (addr2line over the captured addresses).
void resolve_locations(ir::Graph& g);

}  // namespace kiln::jit
