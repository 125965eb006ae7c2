// jit/cost.h -- what a compiled function should cost, read from its optimized graph without
// running it: per kernel the bytes it must read and write, its FLOPs and its launches, and for
// a named device a roofline lower bound, each kernel at the larger of its bytes over the
// memory's bandwidth and its FLOPs over the peak rate of the units it runs on. JAX's compiled
// functions report the first two (cost_analysis()); the bound is what a measured step is held
// against. `kiln-ir cost` prints it for a saved module or an IR file.
//
//   jit::Function step = jit::trace(...);
//   std::cout << step.cost().table(jit::device_peak("H200"));
//
// What counts: a fused group reads its inputs and writes its results once (the least any
// kernel computing them moves); a view moves nothing; a view's reader reads the elements it
// covers, at most its base's (an expand reads its input once). FLOPs: an op's OpDef says for the
// loop-shaped ops (matmul, convolutions, attention, pools, rnn: a multiply-add is two); a
// pointwise op counts one per element it computes, a reduction one per element it reads,
// movement and casts none. Launches: a fused group's kernels as its device plans them (a CUDA
// group may run as stages, its partial results combined by a kernel of its own); every other
// op one, a library call (cuBLAS, cuDNN) one however many kernels the library runs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace kiln::ir {
struct Graph;
struct Node;
}  // namespace kiln::ir

namespace kiln::jit {

/// A device's peaks from its data sheet (dense math, no sparsity).
struct DevicePeak {
  std::string name;
  double bandwidth = 0;    // memory, bytes/s
  double fp32 = 0;         // FLOP/s: f32 on the CUDA cores
  double tf32 = 0;         // f32 on the tensor cores as TF32
  double bf16 = 0;         // bf16 and f16 on the tensor cores
  double fp64 = 0;         // f64 on the CUDA cores
  double fp64_tensor = 0;  // f64 on the tensor cores (cuBLAS's and cuDNN's f64)
  int multiprocessors = 0;
};
/// A100 (SXM4, 80 GB), H100 (SXM5) and H200 (SXM); throws kiln::Error naming those for another.
const DevicePeak& device_peak(std::string_view name);
std::vector<std::string> device_peak_names();

/// Where a kernel's FLOPs run: the CUDA cores, or the tensor cores (GEMMs, convolutions,
/// attention and RNNs through the libraries or kiln's tensor-core kernels).
enum class MathUnit : uint8_t { Cores, TensorCores };

struct KernelCost {
  std::string name;  // "fused amax+sub+exp+sum+div", "matmul", "conv2d_weight_grad"
  int64_t bytes_read = 0, bytes_written = 0;
  double flops = 0;
  int64_t launches = 0;
  DType dtype = DType::F32;  // the dtype it computes in
  MathUnit unit = MathUnit::Cores;
  int64_t bytes() const { return bytes_read + bytes_written; }
  /// The rate its FLOPs run at on `peak`: f32 on the tensor cores as TF32 only when `tf32`.
  double rate(const DevicePeak& peak, bool tf32 = false) const;
  /// The roofline bound in seconds: max(bytes / bandwidth, flops / rate).
  double bound(const DevicePeak& peak, bool tf32 = false) const;
};

struct PlanCost {
  std::vector<KernelCost> kernels;  // in the graph's order
  int64_t bytes() const;
  double flops() const;
  int64_t launches() const;
  /// The sum of the kernels' bounds: a step runs its kernels one after another.
  double bound(const DevicePeak& peak, bool tf32 = false) const;
  /// A table: the `top` kernels by bound (bytes, FLOPs, launches, bound, share), then the totals.
  std::string table(const DevicePeak& peak, size_t top = 20, bool tf32 = false) const;
};

/// The least an eager step must move through memory, whatever its kernels: what PyTorch's
/// (or kiln's untraced) training step is held against. Eager autograd keeps every value its
/// backward reads in memory between the two passes, and its optimizer reads what the backward
/// wrote, so a step moves at least:
/// - activations: the forward's computed values that the backward reads, written and read
///   (a view counted as its base, each base once);
/// - reread: the arguments and parameters the backward reads again (a weight for the input's
///   gradient);
/// - parameters the optimizer updates: read by the forward, read and written by the optimizer;
/// - gradients of those: written by the backward, read by the optimizer;
/// - state the step updates that needs no gradient (the optimizer's moments, BatchNorm's
///   running statistics): read and written;
/// - inputs: the arguments and other parameters, read once.
/// Its FLOPs are the recorded ops' (counted as plan_cost counts them), the bound the larger of
/// the bytes over the bandwidth and the FLOPs over their units' rates: a floor for a step that
/// overlaps everything perfectly, so weaker than plan_cost's sum of per-kernel bounds.
struct EagerFloor {
  int64_t activations = 0, reread = 0, parameters = 0, gradients = 0, state = 0, inputs = 0;
  std::vector<KernelCost> math;  // the ops that compute: FLOPs, dtype and unit (no bytes)
  int64_t bytes() const { return 2 * activations + reread + 3 * parameters + 2 * gradients + 2 * state + inputs; }
  double flops() const;
  double bound(const DevicePeak& peak, bool tf32 = false) const;
};
/// Read from a graph as traced, before optimization: op nodes recorded with grad mode on are
/// the forward, the rest the backward and the optimizer. Per argument and per parameter,
/// whether it requires grad (missing arguments' flags read as no).
EagerFloor eager_floor(const ir::Graph& traced, std::span<const char> args_need_grad, std::span<const char> trained);

/// One fused group's cost over operands of types `inputs` (a compiled plan's kernel step; the
/// profiler's achieved rates of the kernel read it).
KernelCost fused_cost(const ir::Node& fused, std::span<const TensorType> inputs, int multiprocessors = 132);

/// The cost of running `g` once: an optimized graph, fused or not, of concrete shapes. Fused
/// groups' launches are planned for a device of `multiprocessors` (a CUDA group's split
/// depends on it).
PlanCost plan_cost(const ir::Graph& g, int multiprocessors = 132);

}  // namespace kiln::jit
