// distributed/gloo_backend.h -- the Gloo engine of CPU tensors, which also serves the group's
// store and runs the per-collective check for every engine. It is defined in three files: its
// rendezvous (distributed/rendezvous.cpp), its collectives and the worker thread that runs
// them in issue order (distributed/gloo_collectives.cpp), and the cross-rank check that names a
// mismatch or a missing rank (distributed/collective_check.cpp). Internal (not installed);
// Gloo's own headers stay in those .cpp files (scripts/check_includes.sh).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/tcp_store.h"

namespace gloo::rendezvous {
class Context;
}  // namespace gloo::rendezvous

namespace kiln::distributed::detail {

class GlooBackend final : public Backend {
 public:
  /// Joins the group: the store, then Gloo's connections to every rank (rendezvous.cpp).
  explicit GlooBackend(const Options& o);
  ~GlooBackend() override;

  int rank() const override { return o_.rank; }
  int world_size() const override { return o_.world_size; }
  Device device() const override { return cpu; }
  const Options& options() const { return o_; }
  TcpStore& store() { return *store_; }

  // The per-collective check alone (Options::check), for another engine's collective: in this
  // group's order, naming a mismatch or a missing rank as a Gloo collective would.
  void check_only(const char* name, const Tensor& t);

  Work all_reduce(Tensor t, ReduceOp op) override;
  Work broadcast(Tensor t, int root) override;
  Work all_gather(Tensor out, Tensor in) override;
  Work reduce_scatter(Tensor out, Tensor in, ReduceOp op) override;
  Work barrier() override;

 private:
  struct Op {
    const char* name;
    Tensor t;  // the operand checked across ranks (undefined for a barrier)
    std::function<void(uint32_t)> run;
    std::shared_ptr<Work::State> state;
  };

  // The engine (gloo_collectives.cpp).
  void reduce_in_place(const Tensor& t, ReduceOp op, uint32_t tag, const char* what);
  Work enqueue(const char* name, Tensor t, std::function<void(uint32_t)> run);
  void run();

  // The cross-rank check (collective_check.cpp).
  static constexpr int kRecord = 11;  // kind, dtype, rank of the shape, then up to 8 sizes
  void check(const Op& op, uint64_t seq);
  std::string failure(const char* name, uint64_t seq, const std::string& why);
  std::vector<int> gone_ranks();

  Options o_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stopping_ = false;
  uint32_t next_tag_ = 1;  // the worker's (and the constructor's) alone
  uint64_t seq_ = 0;
  std::thread worker_;
};

}  // namespace kiln::distributed::detail
