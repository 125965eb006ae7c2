// distributed/process_group.h -- a group of processes (one per device or machine) and the
// collectives data-parallel training runs on tensors: all_reduce, broadcast, all_gather,
// reduce_scatter and barrier, each also asynchronous with a Work handle.
//
//   auto pg = distributed::ProcessGroup(distributed::options_from_env());  // RANK, WORLD_SIZE,
//   distributed::all_reduce(pg, grad, distributed::ReduceOp::Mean);         // MASTER_ADDR/PORT
//
// The engines underneath are Gloo (the CPU engine PyTorch uses; Debian's libgloo-dev) over TCP
// for CPU tensors, and NCCL for CUDA tensors (distributed/nccl_cuda.cpp; its communicator on a
// device is made at the group's first collective there). A collective goes to the engine of its
// tensor's device. Rendezvous goes through a small TCP store that rank 0 serves
// (distributed/tcp_store.h). A rank that dies or never
// arrives makes the others fail within Options::timeout with an error naming the collective
// and the ranks missing, never a hang; mismatched shapes or dtypes across ranks are an error
// from a cheap check before each collective (Options::check, on by default).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/tensor.h"

namespace kiln::distributed {

enum class ReduceOp { Sum, Mean, Max, Min };

struct Options {
  int rank = -1;
  int world_size = -1;
  std::string master_addr = "127.0.0.1";  // where rank 0 serves the rendezvous store
  int master_port = 29500;
  /// This rank's address for the collectives' connections; "" means 127.0.0.1 when
  /// master_addr is a loopback address, else the address of the interface that routes toward
  /// master_addr (or, when that is a loopback one, the first non-loopback IPv4 interface).
  std::string hostname;
  /// How long a collective (and the rendezvous) waits for the other ranks.
  std::chrono::milliseconds timeout{30000};
  /// Before each collective, the ranks compare its kind, dtype and shape (one small exchange)
  /// and mark their arrival in the store, so a mismatch or a missing rank is named.
  bool check = true;
};

/// Options from the environment launchers set: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
/// and KILN_DIST_TIMEOUT_MS, KILN_DIST_HOSTNAME, KILN_DIST_CHECK=0. Throws kiln::Error naming
/// a missing or malformed variable.
Options options_from_env();

/// An operation in flight. On the CPU, wait() blocks until it completed and rethrows its error.
/// On CUDA (NCCL), the collective runs on a stream of the group's and wait() makes the caller's
/// current stream wait for it without blocking the host, as PyTorch's Work::wait does; the
/// result is then ready for whatever that stream runs next. A collective that did not complete
/// within Options::timeout (a peer died or hung in NCCL) makes the group's NCCL watchdog abort
/// its communicator: wait() on it, and every later collective of the group on that device,
/// then throws kiln::Error naming the collective and the rank.
class Work {
 public:
  void wait() const;
  bool completed() const;
  struct State;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<State> state_;
};

/// What a collective engine provides. Operations run in the order they are issued (one queue
/// per group, as a CUDA stream would order them), each asynchronously.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Where its tensors live: the CPU for Gloo, cuda:N for NCCL.
  virtual Device device() const = 0;
  /// In place over `t` (contiguous, on the backend's device).
  virtual Work all_reduce(Tensor t, ReduceOp op) = 0;
  virtual Work broadcast(Tensor t, int root) = 0;
  /// `out` holds world_size blocks of `in`'s size, rank r's in block r.
  virtual Work all_gather(Tensor out, Tensor in) = 0;
  /// `out` gets block `rank` of the reduction of every rank's `in` (world_size blocks).
  virtual Work reduce_scatter(Tensor out, Tensor in, ReduceOp op) = 0;
  virtual Work barrier() = 0;
};

struct GroupEngines;  // a group's engines, by device (process_group.cpp)

class ProcessGroup {
 public:
  /// Joins the group: rendezvous through rank 0's store, then the engine connects every pair
  /// of ranks. Throws kiln::Error: a bad rank or size, a port in use, an address that does not
  /// resolve, or ranks that do not all arrive within the timeout.
  explicit ProcessGroup(const Options& options);
  ~ProcessGroup();
  ProcessGroup(ProcessGroup&&) noexcept;
  ProcessGroup& operator=(ProcessGroup&&) noexcept;

  int rank() const;
  int world_size() const;
  /// The CPU engine (Gloo).
  Backend& backend() const;
  /// The engine of tensors on `device`: Gloo for the CPU, NCCL for cuda:N, made at the first
  /// call for that device (a collective's first on it: every rank gets there, in the same
  /// order, as with any collective). Throws kiln::Error when NCCL is unavailable, naming why.
  Backend& backend(Device device);
  /// This process's number for the group (1, 2, ...): what a traced all_reduce names in the
  /// IR (`all_reduce %g {group=1, reduce=sum}`). Ranks that make their groups in the same
  /// order agree on it.
  int64_t id() const { return id_; }

 private:
  std::unique_ptr<GroupEngines> engines_;
  int64_t id_ = 0;
};

// The collectives on tensors. Each checks its operands (a kiln::Error names the collective and
// what was expected), runs through the group's backend, and gives a Work to wait on; the plain
// forms wait. Inputs may be any layout; a non-contiguous tensor is reduced through a copy. The
// tensors of one call are on one device, the CPU or a CUDA device; results are on it too.

/// Reduces `t` across the ranks into every rank's `t`. Mean divides the sum by world_size
/// (floating dtypes only).
void all_reduce(ProcessGroup& pg, Tensor& t, ReduceOp op = ReduceOp::Sum);
Work all_reduce_async(ProcessGroup& pg, Tensor& t, ReduceOp op = ReduceOp::Sum);
/// The reduction of every rank's `t`, as a new tensor (sum, mean, max or min): the functional
/// form, which is also differentiable and traceable. Traced (jit::trace of a training step), it
/// becomes an all_reduce op of the compiled graph, run in order at each call.
Tensor all_reduced(ProcessGroup& pg, const Tensor& t, ReduceOp op = ReduceOp::Sum);
/// Copies rank `root`'s `t` into every rank's `t`.
void broadcast(ProcessGroup& pg, Tensor& t, int root = 0);
Work broadcast_async(ProcessGroup& pg, Tensor& t, int root = 0);
/// Every rank's `t`, stacked: [world_size, ...t's shape].
Tensor all_gather(ProcessGroup& pg, const Tensor& t);
/// The reduction of every rank's `t`, split along dim 0 into world_size blocks; this rank's
/// block (dim 0 must divide by world_size).
Tensor reduce_scatter(ProcessGroup& pg, const Tensor& t, ReduceOp op = ReduceOp::Sum);
void barrier(ProcessGroup& pg);

std::string_view reduce_op_name(ReduceOp op);

}  // namespace kiln::distributed
