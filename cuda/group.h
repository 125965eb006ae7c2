// cuda/group.h -- a fused group run as a CUDA kernel (codegen/cuda), compiled through the
// kernel cache (cuda/kernel_cache.h) and queued on the current stream. The compiled plans run
// their groups through it (it registers itself as CUDA's jit/group_runner.h backend when the
// library loads), and eager ops on CUDA as groups of one op (cuda/single_op.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/cuda/emit.h"
#include "codegen/cuda/launch.h"
#include "cuda/stages.h"
#include "ir/graph.h"
#include "runtime/cuda_internal.h"

namespace kiln::cuda {

/// A fused group ready to launch for operands laid out as at preparation: its loop layout, the
/// sizes and strides it passes, its kernel, compiled for one device, and its launch
/// (codegen/cuda/launch.h). The compiled plans (jit/executable.cpp) prepare once and launch
/// per call.
struct PreparedGroup {
  codegen::KernelLayout layout;
  std::vector<int64_t> sizes, strides;
  std::vector<uint64_t> immediates;  // eager kernels: the immediates' bits, in argument order
  std::string symbol;                // kiln_<hash of the source>
  std::string source;                // prepared for group_kernel_sources: the kernel's text
  cuda::DeviceFunction fn;           // on the operands' device
  codegen::CudaLaunch launch;
  /// launch.parts > 1: the groups that reduce the reduced outputs' partial results
  /// [parts, output...] over their first dim, in order; one for all the outputs of a shape
  /// (batch norm's backward: its four per-channel sums combine at once). A combine whose own
  /// launch would be one block runs in this kernel's last block (codegen/cuda/emit.h), so
  /// batch norm's statistics are one launch; a bigger one is a kernel of its own. A full
  /// output is written by each part directly.
  struct Combine {
    std::shared_ptr<const PreparedGroup> group;
    std::shared_ptr<const ir::Graph> body;
    std::vector<size_t> outputs;  // the body's outputs it combines, in its operands' order
    bool in_last_block = false;
  };
  std::vector<Combine> combines;
  std::vector<char> partial;  // per output: written as partial results
  /// A group run as stages (cuda/stages.h), each its own kernel over the group's inputs,
  /// its outputs and temporaries; then the fields above are unused.
  struct Stage {
    std::shared_ptr<const PreparedGroup> group;
    std::vector<stages::Place> reads, writes;
  };
  std::vector<Stage> stages;
  std::vector<TensorType> temps;
  /// Compiled groups: the body and the options its kernel was written with (a batch of its
  /// launches writes the same kernel over several argument structs: launch_group_batch).
  std::shared_ptr<const ir::Graph> body;
  codegen::CudaEmitOptions options;
  std::string label;  // the profiler's name of its kernel
};

/// The launch prepare_group plans for `fused` over contiguous operands of its body's
/// types on a device of `sms` multiprocessors, read without a device (the tests plan the
/// example models' full-size steps for a GPU; `kiln-ir codegen --target=cuda` prints it).
/// One launch per kernel (a group run as stages has several; the combines of partial results
/// that run as kernels of their own are not counted).
std::vector<codegen::CudaLaunch> plan_group_launches(const ir::Node& fused, int sms);
/// The kernels `fused` launches on a device of `sms` multiprocessors: plan_group_launches's,
/// and the combines of partial results that run as kernels of their own (the cost model's
/// count, jit::group_launches).
int64_t count_group_launches(const ir::Node& fused, int sms);
/// How many groups of `fused`'s kernel text share a launch (launch_group_batch) over contiguous
/// operands: 1 for a group that launches alone (jit::group_batch, the cost model's count).
int group_batch_capacity(const ir::Node& fused, int sms);
/// The text of every kernel those launches run, in order, then the combines that are kernels
/// of their own (what `kiln-ir codegen --target=cuda` prints).
std::vector<std::string> group_kernel_sources(const ir::Node& fused, int sms);

/// A group of one op (what an eager op runs): `out` = op(inputs) with `attrs`.
ir::Node single_op_group(OpId op, const Attrs& attrs, std::span<const TensorType> inputs, const TensorType& out);

/// Compiles `fused`'s body for operands shaped and strided as `inputs` (on one CUDA device, any
/// strides; broadcast to the group's domain). `eager` compiles a kernel that fits more calls:
/// its pointwise numbers and every stride are arguments, not part of its text
/// (codegen::CudaEmitOptions), so an eager op compiles once per op, dtypes and loop rank.
/// Throws kiln::Error for a group codegen cannot lower.
PreparedGroup prepare_group(const ir::Node& fused, std::span<const Tensor> inputs, bool eager);
/// Queues `group` on the current stream over `inputs` (laid out as prepared) into `outputs`
/// (contiguous, on its device); an eager group with `immediates` in place of its own (a call
/// with other numbers than the one that prepared it).
void launch_group(const PreparedGroup& group, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                  const std::vector<uint64_t>* immediates = nullptr);
/// Whether `group`'s launches may share one (launch_group_batch): one kernel, no partial results.
bool batchable(const PreparedGroup& group);
/// One launch of a batch: a prepared group and its operands (as launch_group takes them).
struct BatchMember {
  const PreparedGroup* group = nullptr;
  std::span<const Tensor> inputs, outputs;
};
/// Queues `members` (batchable groups of one kernel text, on one device) as a multi-tensor
/// apply: as few launches as their arguments fit (codegen::pack_cuda_batch, about 140 of an
/// Adam update's in one), each block running one member's part. The same as launching each in
/// turn when no member reads what another writes (the caller's promise).
void launch_group_batch(std::span<const BatchMember> members);
/// The bits an eager kernel's immediate travels in: a double's for a float compute dtype, else
/// an int64.
uint64_t immediate_bits(const Scalar& v, bool is_float_op);
/// Both at once, for a group run once (eager ops keep their prepared groups: cuda/single_op.cpp).
void run_group(const ir::Node& fused, std::span<const Tensor> inputs, std::span<const Tensor> outputs, bool eager);

}  // namespace kiln::cuda
