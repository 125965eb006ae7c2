// jit/trace.h -- jit::trace: turn a function of tensors into a graph, run it from a cache.
//
//   auto fast = jit::trace([&](Tensor x, Tensor y) { return cross_entropy(net(x), y); }, {x, y});
//   Tensor loss = fast(x, y);     // trace() traced this signature; a new one traces on its call
//   std::cout << fast.graph();    // the optimized IR
//
// What a trace keeps, and what it doesn't:
// - Tensors the function reads that existed before the trace (module parameters, optimizer
//   state) become parameters of the graph: they stay live, so updating them (in place or by
//   load_state_dict) needs no retrace. In-place updates the function makes to them (an
//   optimizer step) are part of the graph and happen on every call; so are the gradients a
//   backward() inside the function leaves in their grad(), and the ones it drops (zero_grad).
//   A function that sets or drops a gradient before it uses the tensor never reads the one a
//   call starts with; otherwise whether grad() is defined is part of the signature.
// - In-place writes into tensors the function computed are traced too. Writing into an
//   argument or through a view throws, as does reading a view or detach() of a tensor after
//   an in-place write to it (eagerly it would see the write; the graph cannot).
// - Tensors the function creates from nothing (zeros, arange, a tensor from a vector) are
//   constants of the trace, as are plain C++ numbers it uses: a learning rate held in a double
//   is baked in. Pass a value that changes between calls as a 0-d tensor argument, or keep it
//   in a 0-d tensor the function reads (the optimizers here do). Random draws (rand, randn,
//   bernoulli, dropout) are ops reading the generator's state, bound anew at each call: every
//   call draws what the function would eagerly. randint and randperm throw inside a trace.
// - Reading a value while tracing (item(), to_vector(), printing, branching on data) throws:
//   values exist only when the compiled function runs.
// - A function that calls backward() (without retain_graph or create_graph) has used its own
//   gradients: it runs untaped and fused, and its results carry no gradient history (a
//   second backward() on the loss it returns throws).
// - A function that only computes, called with grad mode on and inputs (or captured tensors)
//   that require grad, runs one compiled forward; its results hang off one autograd node
//   whose backward runs one compiled backward graph (traced from the same vjp rules, split
//   from the forward by a min cut). create_graph=true through it throws.
// - A new input signature (dtypes, shapes, devices, requires-grad, grad mode) is traced anew.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "jit/cost.h"
#include "runtime/tensor.h"

namespace kiln::ir {
struct Graph;
}

namespace kiln::jit {

struct FunctionAccess;

struct Stats {
  int64_t traces = 0;  // calls that traced (a new signature)
  int64_t hits = 0;    // calls that found their plan
  int64_t misses = 0;  // calls that did not (equals traces)
  /// For the plan used last, when it is differentiable: the bytes of computed values each call
  /// keeps for its backward (arguments and captured tensors are not counted).
  int64_t saved_bytes = 0;
  /// For the plan used last: the fused kernels one call runs.
  int64_t kernels = 0;
  /// For the plan used last, on CUDA: the calls of its forward and compiled backward that
  /// replayed a CUDA graph, the captures they made (one, unless parameters or inputs moved),
  /// and why its forward does not replay ("" while it may; see set_cuda_graphs_enabled).
  int64_t graph_replays = 0, graph_captures = 0;
  std::string graph_refusal;
};

/// The process's kernel cache: every traced or loaded function's fused kernels.
struct KernelCacheStats {
  int64_t hits = 0;       // found in memory
  int64_t misses = 0;     // not in memory
  int64_t disk_hits = 0;  // misses served from the disk cache
  int64_t compiles = 0;   // misses compiled (by LLVM, or NVRTC for CUDA)
};
KernelCacheStats kernel_cache_stats();

/// Whether traced functions run fused kernels (default on). Off (or KILN_FUSION=0), the
/// optimized graph runs op by op on the eager kernels, bit-identical to eager mode; a plan
/// remembers the setting it was made with.
bool fusion_enabled();
void set_fusion_enabled(bool on);

/// Whether compiled calls on CUDA replay as CUDA graphs (default on). The second call of a plan
/// whose device work is all on one CUDA device, with static shapes, is captured once; later
/// calls run its CPU part (an optimizer's scalars, the generator's state), copy their inputs
/// in, replay it with one launch and get copies of its outputs. Off (or KILN_CUDA_GRAPHS=0),
/// every call launches its kernels one by one. KILN_LOG=cache says when a plan is captured,
/// and why one is not (jit/graph_replay.h).
bool cuda_graphs_enabled();
void set_cuda_graphs_enabled(bool on);

/// The type-erased function a trace runs: tensors in, tensors out.
using TensorFn = std::function<std::vector<Tensor>(std::span<const Tensor>)>;
/// Names for tensors a trace may capture (a module's named parameters and buffers): the graph's
/// parameters print with them.
using ParamNames = std::vector<std::pair<std::string, Tensor>>;

/// A traced function. Copies share one plan cache; calls are thread-safe.
class Function {
 public:
  Function(TensorFn fn, std::string name, ParamNames names = {});

  /// Runs on `inputs`, tracing first when their signature is new; returns every output.
  std::vector<Tensor> call(std::span<const Tensor> inputs) const;
  /// Traces and compiles for the signature of `inputs` without running: nothing the function
  /// does (an optimizer step, gradients) happens until a call.
  void compile(std::span<const Tensor> inputs) const;
  /// Runs and returns the first output.
  template <class... T> Tensor operator()(const T&... inputs) const {
    Tensor args[] = {Tensor(inputs)...};
    std::vector<Tensor> out = call(std::span<const Tensor>(args, sizeof...(T)));
    return out.empty() ? Tensor() : out[0];
  }

  /// A copy of the optimized graph of the most recently used signature, with source lines
  /// resolved (throws before the first call). A snapshot: safe while other threads call the
  /// function and its cache evicts plans.
  ir::Graph graph() const;
  /// What one call of that graph should cost (jit/cost.h): bytes, FLOPs and launches per
  /// kernel, fused groups planned for a device of `multiprocessors` (an H100's and H200's 132).
  PlanCost cost(int multiprocessors = 132) const;
  /// The least the same call must move run eagerly, op by op (jit/cost.h): the figure
  /// PyTorch's eager step is held against.
  EagerFloor eager_floor() const;
  Stats stats() const;
  /// Bound on cached signatures; past it the least recently used plan is dropped.
  void set_cache_limit(size_t plans);

  struct State;

 private:
  friend struct FunctionAccess;  // jit::save reads the plan
  std::shared_ptr<State> state_;
};

namespace detail {
std::string fmt_arity_error(size_t arity);
/// Throws kiln::Error unless a function of `arity` tensors is called with `given` of them.
void check_call_arity(size_t arity, size_t given);
template <class R> std::vector<Tensor> outputs_of(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Tensor>) return {std::forward<R>(r)};
  else if constexpr (std::is_same_v<T, std::vector<Tensor>>) return std::forward<R>(r);
  else return std::apply([](auto&&... t) { return std::vector<Tensor>{Tensor(t)...}; }, std::forward<R>(r));
}
template <class F, size_t... I> TensorFn erase(F fn, std::index_sequence<I...>) {
  return [fn](std::span<const Tensor> in) mutable {
    check_call_arity(sizeof...(I), in.size());
    return outputs_of(fn(in[I]...));
  };
}
template <size_t> using AsTensor = Tensor;
template <class F, size_t... I> constexpr bool takes_tensors(std::index_sequence<I...>) {
  return std::is_invocable_v<F&, AsTensor<I>...>;
}
template <class F, size_t N = 0> TensorFn erase_any(F fn, size_t arity) {
  if constexpr (N > 8) {
    throw Error(fmt_arity_error(arity));
  } else {
    if constexpr (takes_tensors<F>(std::make_index_sequence<N>()))
      if (arity == N) return erase(std::move(fn), std::make_index_sequence<N>());
    return erase_any<F, N + 1>(std::move(fn), arity);
  }
}
}  // namespace detail

/// Traces `fn` (callable with as many Tensors as example_inputs has) on example_inputs and
/// returns the callable Function. fn may return a Tensor, a std::vector<Tensor> or a tuple.
/// Tracing runs no kernels and changes nothing: a traced training step first trains when it is
/// first called, not when it is traced.
template <class F> Function trace(F fn, std::vector<Tensor> example_inputs, std::string name = "fn") {
  Function f(detail::erase_any(std::move(fn), example_inputs.size()), std::move(name));
  f.compile(example_inputs);
  return f;
}
/// Traces a module: m(x) with one tensor argument (an nn::UnaryModule, or anything with
/// operator() and named_parameters()/named_buffers()); the graph names its parameters after
/// the module's state_dict keys ("fc1.weight").
template <class M> Function trace_module(M& m, const Tensor& example_input, std::string name = "forward") {
  ParamNames names;
  for (auto& [n, t] : m.named_parameters()) names.emplace_back(n, t);
  for (auto& [n, t] : m.named_buffers()) names.emplace_back(n, t);
  Function f(
      [&m](std::span<const Tensor> in) {
        detail::check_call_arity(1, in.size());
        return std::vector<Tensor>{m(in[0])};
      },
      std::move(name), std::move(names));
  Tensor args[] = {example_input};
  f.compile(args);
  return f;
}

/// trace() for a function already in the erased form.
Function trace_tensors(TensorFn fn, std::span<const Tensor> example_inputs, std::string name = "fn");

}  // namespace kiln::jit
