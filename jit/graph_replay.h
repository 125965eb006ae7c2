// jit/graph_replay.h -- a compiled plan replayed as one device graph: one launch instead of one
// per kernel, which is most of what a small step costs on a GPU. jit decides, from the plan
// alone, whether it may replay and how it splits (replay_layout: tested without a device); the
// device's layer captures and replays it (CUDA's: cuda/graph.h), behind the PlanReplay
// interface that layer registers when the library loads, as fused groups' runners are
// (jit/group_runner.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "jit/trace.h"  // cuda_graphs_enabled
#include "runtime/tensor.h"

namespace kiln::jit {

/// How a plan splits for replay. Its host part, the values on the CPU (an optimizer's
/// learning rate and step count and what is computed from them, the generator's state that
/// random draws read) and the assigns to CPU params, runs on the host at every call. The
/// device part, everything else, is captured: the CPU values it reads (`crossing`) are copied
/// to the device before each launch, as the ops reading them would copy them, and it reads
/// those copies.
struct ReplayLayout {
  /// Why `g` cannot replay, or "" when it can: every device value must be on one CUDA device,
  /// with static shapes; no host op may read a device value (that waits for the device); no op
  /// may record autograd (the tape keeps each call's tensors) or be a collective; no output may
  /// be a view of an argument (replays return copies).
  std::string refusal;
  enum Part : char { kDevice, kHost, kBoth };
  std::vector<char> host;                                 // per node: its part (constants are in both)
  std::vector<uint32_t> crossing;                         // CPU values that device nodes read: copied at every call
  std::vector<uint32_t> uploads;                          // CPU constants copied to the device: copied once
  std::vector<std::pair<size_t, uint32_t>> host_assigns;  // (param index, value) of CPU params
  Device device = cpu;                                    // the device of the device part
};
ReplayLayout replay_layout(const ir::Graph& g);
/// replay_layout(g).refusal.
std::string graph_replay_refusal(const ir::Graph& g);

/// Whether any value of `g` lives on a CUDA device (a plan worth deciding about).
bool uses_cuda(const ir::Graph& g);

/// A plan captured as a device graph and replayed.
class PlanReplay {
 public:
  /// The plan's two parts. host: runs the host part, returning every value by id (the host
  /// ones set). device: runs the device part, with `values` (by id) holding the crossing
  /// values as device scalars, and returns the plan's outputs (its host outputs unset).
  struct Plan {
    std::function<std::vector<Tensor>(std::span<const Tensor> inputs, std::span<const Tensor> params)> host;
    std::function<std::vector<Tensor>(std::span<const Tensor> inputs, std::span<const Tensor> params,
                                      std::vector<Tensor> values)>
        device;
  };
  virtual ~PlanReplay() = default;
  /// The call's outputs, from the graph (run, captured or replayed as the device's layer
  /// decides); nullopt when this call runs the plan as usual.
  virtual std::optional<std::vector<Tensor>> run(std::span<const Tensor> inputs, std::span<const Tensor> params,
                                                 const Plan& plan) = 0;
  virtual size_t captures() const = 0;
  virtual size_t replays() const = 0;
  /// Why calls no longer replay ("" while they may).
  virtual std::string refusal() const = 0;
};

/// Makes the replay of plan `g`, whose replay_layout is `layout` (with no refusal).
using ReplayBackend = std::unique_ptr<PlanReplay> (*)(const ir::Graph& g, ReplayLayout layout);
void register_replay_backend(DeviceType type, ReplayBackend backend);
/// The replay of `g` by the backend of its layout's device type; nullptr, with `*why`, when
/// that type has none.
std::unique_ptr<PlanReplay> make_replay(const ir::Graph& g, ReplayLayout layout, std::string* why);

}  // namespace kiln::jit
