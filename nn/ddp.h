// nn/ddp.h -- nn::DistributedDataParallel: one model replica per process, gradients
// averaged across the process group during backward, as PyTorch's DDP does.
//
//   distributed::ProcessGroup pg(distributed::options_from_env());   // kiln-run -n 2 ./train
//   Net net;
//   nn::DistributedDataParallel ddp(net, pg);   // rank 0's parameters and buffers everywhere
//   optim::SGD opt(net.parameters(), 0.1);
//   for (auto [x, y] : loader) {                // a DistributedSampler gives each rank its shard
//     opt.zero_grad();
//     cross_entropy(net(x), y).backward();     // every rank ends with the same, averaged grads
//     opt.step();
//   }
//
// Gradients are grouped into buckets (about 25 MB; the first smaller, 1 MB) in reverse order of
// registration, which is roughly the order backward produces them. A post-accumulate-grad hook
// on each parameter counts its bucket down; a full bucket is flattened and its all-reduce starts
// asynchronously while backward goes on (buckets start in bucket order, the same on every rank).
// When backward ends, DDP waits for the reductions and gives each parameter its averaged
// gradient, a view of its bucket. A compiled function's backward fires the hooks as it writes
// each gradient, so `fast(x).backward()` overlaps the same way. Traced inside a whole training
// step (jit::trace over forward, backward and the optimizer), the hooks run once, while tracing,
// and each bucket's reduction is recorded as an all_reduce op of the graph: an ordered effect
// that the compiled step runs between backward and the update at every call.
//
// A parameter that gets no gradient on a rank (unused in its forward) adds zeros to its bucket,
// so every rank ends with the same gradient; one that no rank used ends with a zero gradient
// (PyTorch leaves it undefined).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "distributed/process_group.h"
#include "nn/module.h"

namespace kiln::nn {

struct DdpOptions {
  size_t bucket_bytes = 25u << 20;       // a bucket's size cap (PyTorch's bucket_cap_mb = 25)
  size_t first_bucket_bytes = 1u << 20;  // the first bucket's: its reduction starts earliest
  bool broadcast_buffers = true;         // at construction, with the parameters
};

/// What happened during the last synchronized backward, in order (tests and the profiler of
/// a curious user read it).
struct DdpEvent {
  enum Kind { GradReady, BucketStarted, BackwardEnded, BucketReduced } kind;
  size_t index;  // GradReady: the parameter (among the module's parameters that require grad,
                 // in registration order); the bucket events: the bucket
};

class DistributedDataParallel {
 public:
  /// Registers the hooks and makes every rank's parameters and buffers rank 0's. The module
  /// and the group must outlive this object.
  DistributedDataParallel(Module& module, distributed::ProcessGroup& pg, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Module& module() { return module_; }
  /// The module's forward, for a UnaryModule (calling the module itself is the same).
  Tensor operator()(const Tensor& x);

  /// While the guard lives, backward accumulates gradients locally without reducing them
  /// (gradient accumulation); the first backward after it reduces the sums.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), prev_(d.sync_) { d.sync_ = false; }
    ~NoSync() { d_.sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  NoSync no_sync() { return NoSync(*this); }

  /// The buckets, as indices into module().parameters(), in reduction order.
  std::vector<std::vector<size_t>> buckets() const;
  const std::vector<DdpEvent>& events() const { return events_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    DType dtype = DType::F32;
    Device device = cpu;  // where its parameters live: a bucket is one dtype on one device
    int64_t numel = 0;
    size_t pending = 0;
    Tensor flat;                            // the gradients, flattened; reduced in place
    std::optional<distributed::Work> work;  // eager: the reduction in flight
  };

  void on_grad_ready(size_t param);
  void start_ready_buckets();
  void start(Bucket& b);
  void finish();

  Module& module_;
  distributed::ProcessGroup& pg_;
  std::vector<Tensor> params_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<size_t> offset_;     // per parameter: its first element in its bucket
  std::vector<Bucket> buckets_;
  std::vector<char> ready_;  // per parameter, this backward
  std::vector<autograd::HookHandle> hooks_;
  std::vector<DdpEvent> events_;
  size_t next_bucket_ = 0;
  bool armed_ = false;  // a synchronized backward is in progress
  bool sync_ = true;
};

}  // namespace kiln::nn
