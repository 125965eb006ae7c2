// jit/group_runner.h -- how a fused group's kernel runs on one device. The Executable prepares a
// GroupRunner once, for the operands' layout, and launches it at each call; a device with a
// code generator adds a backend here instead of a branch there: the CPU's (LLVM kernels split
// over the thread pool, jit/cpu_group.cpp) and CUDA's (NVRTC kernels on the current stream,
// cuda/group.cpp) register themselves when the library loads.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "ir/graph.h"
#include "runtime/tensor.h"

namespace kiln::jit {

class GroupRunner;

/// One launch of a batch (GroupRunner::launch_batch): a runner and its operands.
struct BatchLaunch {
  const GroupRunner* runner = nullptr;
  std::span<const Tensor> inputs, outputs;
};

class GroupRunner {
 public:
  virtual ~GroupRunner() = default;
  /// The kernel's symbol, kiln_<hash of its source> (the profiler shows it).
  virtual const std::string& symbol() const = 0;
  /// Runs the group over `inputs` (laid out as at preparation) into `outputs` (contiguous, on
  /// the group's device).
  virtual void launch(std::span<const Tensor> inputs, std::span<const Tensor> outputs) const = 0;
  /// Runners whose launches may share one (a multi-tensor apply, as an optimizer's update of
  /// every parameter is: one kernel text over many tensors) have the same nonempty key; ""
  /// (the default) runs alone.
  virtual const std::string& batch_key() const {
    static const std::string none;
    return none;
  }
  /// Runs `launches` (runners of this one's batch key) in as few launches as the device
  /// allows, in any order: none may read what another writes (the Executable's promise).
  virtual void launch_batch(std::span<const BatchLaunch> launches) const {
    for (const BatchLaunch& l : launches) l.runner->launch(l.inputs, l.outputs);
  }
};

/// Prepares fused node `fused` for operands shaped and strided as `inputs`, all on one device.
using GroupBackend = std::unique_ptr<GroupRunner> (*)(const ir::Node& fused, std::span<const Tensor> inputs);
void register_group_backend(DeviceType type, GroupBackend backend);
/// The kernels fused node `fused` launches on a device of `multiprocessors`, planned without one
/// (a CUDA group may run as stages, and combine its parts in a kernel of its own). A device's
/// layer registers its planner beside its backend; without one, a group is one launch.
using GroupLaunches = int64_t (*)(const ir::Node& fused, int multiprocessors);
void register_group_launches(DeviceType type, GroupLaunches launches);
int64_t group_launches(const ir::Node& fused, Device device, int multiprocessors);
/// How many alike groups (one kernel text: GroupRunner::batch_key) share one launch with
/// `fused`, planned without a device; 1 (every device without a planner): it launches alone.
using GroupBatch = int (*)(const ir::Node& fused, int multiprocessors);
void register_group_batch(DeviceType type, GroupBatch batch);
int group_batch(const ir::Node& fused, Device device, int multiprocessors);

/// Whether devices of `type` have a group backend (the fuse pass forms groups only there).
bool has_group_backend(DeviceType type);
/// The runner of the backend of `device`'s type. Throws kiln::Error when that device has no
/// backend, or its code generator cannot lower the group (the group then runs op by op).
std::unique_ptr<GroupRunner> prepare_group(const ir::Node& fused, Device device, std::span<const Tensor> inputs);

}  // namespace kiln::jit
