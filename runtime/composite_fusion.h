// runtime/composite_fusion.h -- eager composites as compiled functions on CUDA.
//
// softmax, log_softmax, logsumexp, layer_norm and nn's norms and losses are composites of
// ops: they differentiate, trace and run on every device for free, but eagerly on a GPU each
// primitive is a kernel and a tensor in memory. Called eagerly on CUDA tensors, such a composite runs
// instead as a jit::Function of its body: traced once per key (the op and the attributes its
// body captures) and input signature, cached, fused into a kernel per pass, with one autograd
// node whose backward is the compiled backward (a kernel per pass again). What it computes is
// the composite's, rounded as fused kernels round.
//
// It stays op by op on the CPU, while a trace records (the trace sees the primitives), with
// fusion off (jit::set_fusion_enabled, KILN_FUSION=0), for a size-0 argument, and inside a
// CompositeFusionOff. A backward with create_graph through such a node runs the body again,
// op by op, and records that (the node keeps the call's arguments for it).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

/// A composite's body for fixed attributes: a pure function of its tensor arguments (it reads
/// no other tensor and writes none).
using CompositeBody = std::function<std::vector<Tensor>(std::span<const Tensor>)>;

/// Whether a composite called now on `args` runs compiled (see above).
bool composite_fuses(std::span<const Tensor> args);
/// Runs `body` on `args` as the compiled function cached under `key`, which must name every
/// attribute `body` depends on besides its arguments' types ("softmax dim=1").
std::vector<Tensor> run_composite(const std::string& key, std::span<const Tensor> args, const CompositeBody& body);

/// Composites run op by op on this thread while one lives.
class CompositeFusionOff {
 public:
  CompositeFusionOff();
  ~CompositeFusionOff();
  CompositeFusionOff(const CompositeFusionOff&) = delete;
  CompositeFusionOff& operator=(const CompositeFusionOff&) = delete;
};

namespace detail {
/// What jit installs when the library loads: the runner, and whether fusion is on.
using CompositeRunner = std::vector<Tensor> (*)(const std::string&, std::span<const Tensor>, const CompositeBody&);
void install_composite_runner(CompositeRunner run, bool (*fusion_on)());
}  // namespace detail

}  // namespace kiln
