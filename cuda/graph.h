// cuda/graph.h -- a compiled plan on CUDA replayed as one CUDA graph (jit/graph_replay.h says
// when and how a plan splits; this captures and replays it, and registers itself as CUDA's
// replay backend when the library loads).
//
// The second call of a plan that may be replayed runs it under stream capture on a side
// stream; every allocation of the capture comes from the graph's private pool
// (CachingAllocator), so the addresses the kernels were given stay theirs. Later calls launch
// the graph on the current stream and return copies of its outputs (the graph's own are
// overwritten by the next replay). Parameters are used where they are; when a call passes
// them at other addresses the plan is captured again. Contiguous device inputs are read where
// they are too (an optimizer's gradients, which the caching allocator hands out at the same
// addresses step after step): the first call whose inputs are not where the graph reads them
// captures again, with every input copied into buffers the graph keeps, as each later call
// then copies them. The first call runs as usual: it
// compiles the kernels and lets cuBLAS and cuDNN choose their algorithms, which may
// synchronize. A training step's values on the CPU (ReplayLayout: an optimizer's scalars, the
// generator's state) are computed on the host at each call and copied in like inputs.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "jit/graph_replay.h"
#include "runtime/cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/tensor.h"

namespace kiln::cuda {

/// The error flags of checked index ops (gather, scatter) in a plan being captured. Each takes
/// a slot of the graph's flag buffer, zeroed before the capture; after each replay the slots
/// join the device's deferred checks (runtime/cuda_internal.h's defer_check), read and zeroed
/// at the next call that waits for the device, as an eager gather's are: a replay never waits.
class CapturedChecks {
 public:
  static constexpr int64_t kSlots = 64;
  /// Zeroed slots on `device`, before a capture.
  void reset(int device);
  /// A slot (i64[2]: found, the index) for op `op` over a dim of `size`.
  Tensor flag(const char* op, int64_t size);
  /// Defers the slots' checks to the device's next synchronizing call (after a replay).
  void defer(int device) const;
  bool empty() const { return ops_.empty(); }

 private:
  Tensor flags_;
  std::vector<std::pair<const char*, int64_t>> ops_;
};
/// The checks of the capture running on this thread, or nullptr.
CapturedChecks* captured_checks();

class GraphReplay final : public jit::PlanReplay {
 public:
  /// For plan `g`, whose replay_layout(g) is `layout` (with no refusal).
  GraphReplay(const ir::Graph& g, jit::ReplayLayout layout);
  ~GraphReplay() override;

  /// The call's outputs: on the first call by running `plan`'s parts on the graph's buffers,
  /// later by replaying the captured graph (capturing it first when there is none yet);
  /// nullopt when this call runs the plan as usual: a call while another thread replays, and
  /// every call from a failed capture on.
  std::optional<std::vector<Tensor>> run(std::span<const Tensor> inputs, std::span<const Tensor> params,
                                         const Plan& plan) override;

  size_t captures() const override;
  size_t replays() const override;
  std::string refusal() const override;

 private:
  std::vector<Tensor> stage(std::span<const Tensor> inputs, const std::vector<Tensor>& host,
                            std::vector<Tensor>& device_inputs);
  bool capture(std::span<const Tensor> inputs, std::span<const Tensor> params, const Plan& plan,
               std::vector<Tensor> values);
  void refuse(std::string why);

  std::string name_;
  jit::ReplayLayout layout_;
  std::vector<uint32_t> graph_inputs_, graph_outputs_;
  std::vector<char> cpu_input_, cpu_output_;  // per input, per output: a host value
  std::vector<size_t> assigned_;              // the params the device part assigns
  mutable std::mutex mu_;
  size_t calls_ = 0, captures_ = 0, replays_ = 0;
  std::string refusal_;
  std::unique_ptr<CapturedGraph> graph_;
  // The graph's own buffers: its device inputs, the device scalars of the crossing values (by
  // value id), its outputs.
  std::vector<Tensor> inputs_, scalars_, outputs_;
  std::vector<const void*> params_;  // where the captured graph has the params
  // Per input: where the captured graph reads it in place, or nullptr (staged: copied into
  // inputs_, as every input is once one moved).
  std::vector<const void*> in_place_;
  bool stage_all_ = false;
  CapturedChecks checks_;
  // Recorded on the caller's stream after a call's last use of the graph's buffers (staging,
  // replay, output copies): the next call, on whatever stream, waits for it before staging, so
  // a call on stream B never overwrites what a replay on stream A still reads.
  std::unique_ptr<Event> last_use_;
};

}  // namespace kiln::cuda
