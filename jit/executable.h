// jit/executable.h -- a compiled plan: the fused graph as a flat list of steps (eager ops,
// kernel calls, assigns) with a static memory plan for the intermediates kernels write.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "ir/graph.h"
#include "runtime/tensor.h"

namespace kiln::jit {

struct ExecutableStats {
  size_t kernels = 0;          // fused groups compiled to kernels
  size_t ops = 0;              // ops run eagerly (matmul, conv, data movement, taped ops)
  size_t planned_bytes = 0;    // workspace for intermediates, reused across calls
  size_t in_place = 0;         // assigns whose kernel writes into the param itself
  size_t graph_captures = 0;   // CUDA graphs captured (jit/cuda_graph.h)
  size_t graph_replays = 0;    // calls that replayed one
  std::string graph_refusal;   // why calls do not replay one ("" while they may; CPU plans say so)
};

/// How a fused node's kernel is called for operands of these shapes and strides: the loop
/// layout (its structure, the kernel cache's key), the sizes and strides it is passed, and how
/// the parallel dim's range splits across threads.
struct KernelArgs {
  codegen::KernelLayout layout;
  std::vector<int64_t> sizes, strides;
  int64_t range = 0, grain = 1;
  /// A group whose outputs are all reductions that nothing in it reads, with few kept indices
  /// to spread over threads: each call reduces one run of `run` entries of loop dim
  /// `split_dim` into a partial result, and the partials are combined in run order (so the
  /// bits do not depend on the thread count). split_dim -1: no split.
  int split_dim = -1;
  int64_t run = 0, runs = 0;
  std::vector<OpId> combine;  // per output: the reduction that combines its partials
};
KernelArgs kernel_args(const ir::Node& fused, std::span<const Dims> shapes, std::span<const Dims> strides);

/// The reductions producing each of `body`'s outputs, when every output is one and no node of
/// the body reads a reduction's result (such a group may reduce in parts, then combine the
/// partial results with these ops); else empty.
std::vector<OpId> terminal_reductions(const ir::Graph& body);

/// Per value of `g`, the value whose storage it shares: itself, or for a view the base it views.
std::vector<uint32_t> view_bases(const ir::Graph& g);

/// A fused group named for people by its ops ("fused amax+sub+exp+sum+div"): its kernel's
/// symbol is a hash. The profiler and kiln-ir inspect show it.
std::string group_label(const ir::Graph& body);

class Executable {
 public:
  /// `g` is verified (and usually fused). Each op node runs through apply(); with `kernels`,
  /// each Fused node runs as one compiled kernel (compiled on first use), planned into a
  /// workspace or written into the param it updates. Without, a Fused node runs its body op by
  /// op: the reference semantics, which is jit::run_graph.
  explicit Executable(ir::Graph g, bool kernels = true);
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
