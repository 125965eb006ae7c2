// jit/executable.h -- a compiled plan run: the fused graph as a flat list of steps (eager ops,
// kernel calls, assigns) over the run plan of jit/plan.h.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "jit/plan.h"
#include "runtime/tensor.h"

namespace kiln::jit {

struct ExecutableStats {
  size_t kernels = 0;         // fused groups compiled to kernels
  size_t ops = 0;             // ops run eagerly (matmul, conv, data movement, taped ops)
  size_t planned_bytes = 0;   // workspace for intermediates, reused across calls
  size_t in_place = 0;        // assigns whose kernel writes into the param itself
  size_t graph_captures = 0;  // device graphs captured (jit/graph_replay.h)
  size_t graph_replays = 0;   // calls that replayed one
  std::string graph_refusal;  // why calls do not replay one ("" while they may; CPU plans say so)
};

/// A fused group named for people by its ops ("fused amax+sub+exp+sum+div"): its kernel's
/// symbol is a hash. The profiler and kiln-ir inspect show it.
std::string group_label(const ir::Graph& body);

class Executable {
 public:
  /// `g` is verified (and usually fused). Each op node runs through apply(); with `kernels`,
  /// each Fused node runs as one compiled kernel (compiled on first use), planned into a
  /// workspace or written into the param it updates. Without, a Fused node runs its body op by
  /// op: the reference semantics, which is jit::run_graph.
  /// With `graphs` false, a plan on CUDA never replays as a CUDA graph (an eager composite's:
  /// copying its inputs in and its outputs out would cost what its kernels do).
  explicit Executable(ir::Graph g, bool kernels = true, bool graphs = true);
  ~Executable();

  /// Called with an output as soon as the node computing it ran (outputs that are inputs,
  /// params or constants: at the end), while later nodes still run.
  using OutputReady = std::function<void(size_t output, const Tensor& value)>;
  /// Runs with `inputs` bound to graph.inputs and `params` to graph.params.
  std::vector<Tensor> run(std::span<const Tensor> inputs, std::span<const Tensor> params,
                          const OutputReady* ready = nullptr) const;

  const ir::Graph& graph() const;
  ExecutableStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::jit
