// distributed/process_group.cpp -- the process group and the collectives on tensors: each goes
// to the engine of its tensor's device, Gloo for the CPU (distributed/gloo_backend.h) and NCCL
// for CUDA (distributed/nccl.h, which joins through the same store and runs the same check);
// the live groups by id, for the traced all_reduce op; and the Work handle.
#include "distributed/process_group.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "distributed/gloo_backend.h"
#include "distributed/nccl.h"
#include "distributed/work.h"
#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/collective.h"

namespace kiln::distributed {

void Work::wait() const {
  if (state_->event) {  // on a CUDA stream: the caller's stream waits for it
    {
      std::lock_guard<std::mutex> lock(state_->mu);  // failed: the NCCL watchdog's message
      if (state_->failed) throw Error(state_->error);
    }
    state_->event->block(cuda::current_stream(state_->device));
    return;
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->failed) throw Error(state_->error);
}

bool Work::completed() const {
  if (state_->event) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->done) return true;
    }
    return state_->event->query();
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

namespace {

Tensor contiguous_operand(const Tensor& t, const char* what) {
  KILN_CHECK(t.defined(), "distributed: {}: the tensor is undefined", what);
  return t.is_contiguous() ? t : t.contiguous();
}

}  // namespace

// A group's engines: Gloo, which also serves the store and runs the per-collective check,
// and NCCL's communicators by CUDA device, made on first use (the k-th one made takes the
// store's key "nccl/k", which every rank reaches in the same order).
struct GroupEngines {
  std::unique_ptr<detail::GlooBackend> gloo;
  std::mutex mu;
  std::map<int, std::unique_ptr<Backend>> cuda;
  int made = 0;

  Backend& of(Device d) {
    if (d.is_cpu()) return *gloo;
    KILN_CHECK(d.is_cuda(), "distributed: tensors on {} have no collective engine (the CPU's is Gloo, CUDA's NCCL)",
               d.str());
    std::lock_guard<std::mutex> lock(mu);
    std::unique_ptr<Backend>& b = cuda[d.index];
    if (!b) {
      std::function<void(const char*, const Tensor&)> check;
      if (gloo->options().check)
        check = [g = gloo.get()](const char* name, const Tensor& t) { g->check_only(name, t); };
      b = make_nccl_backend(gloo->store(), gloo->options(), d.index, fmt::format("nccl/{}", made++), check);
    }
    return *b;
  }
  ~GroupEngines() {
    cuda.clear();  // before Gloo: they join and check through it
  }
};

namespace {

// The live groups by id, for the all_reduce op (which names its group by number).
std::mutex g_groups_mu;
std::map<int64_t, GroupEngines*> g_groups;
int64_t g_next_group = 1;

ReduceOp reduce_op_of(Combine c) {
  switch (c) {
    case Combine::Max: return ReduceOp::Max;
    case Combine::Min: return ReduceOp::Min;
    default: return ReduceOp::Sum;
  }
}

void run_all_reduce_op(int64_t group, Combine reduce, const Tensor& data) {
  GroupEngines* g = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_groups_mu);
    auto it = g_groups.find(group);
    KILN_CHECK(it != g_groups.end(),
               "all_reduce: process group {} does not exist in this process (it was "
               "destroyed, or the graph was traced in another process)",
               group);
    g = it->second;
  }
  g->of(data.device()).all_reduce(data, reduce_op_of(reduce)).wait();
}

int64_t register_group(GroupEngines* g) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  if (g_groups.empty()) set_all_reduce_engine(run_all_reduce_op);
  int64_t id = g_next_group++;
  g_groups[id] = g;
  return id;
}

void unregister_group(int64_t id) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  g_groups.erase(id);
}

std::unique_ptr<GroupEngines> make_engines(const Options& options) {
  auto e = std::make_unique<GroupEngines>();
  e->gloo = std::make_unique<detail::GlooBackend>(options);
  return e;
}

}  // namespace

ProcessGroup::ProcessGroup(const Options& options)
    : engines_(make_engines(options)), id_(register_group(engines_.get())) {}
ProcessGroup::~ProcessGroup() {
  if (engines_) unregister_group(id_);
}
ProcessGroup::ProcessGroup(ProcessGroup&& o) noexcept : engines_(std::move(o.engines_)), id_(std::exchange(o.id_, 0)) {}
ProcessGroup& ProcessGroup::operator=(ProcessGroup&& o) noexcept {
  if (this != &o) {
    if (engines_) unregister_group(id_);
    engines_ = std::move(o.engines_);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

Tensor all_reduced(ProcessGroup& pg, const Tensor& t, ReduceOp op) {
  KILN_CHECK(t.defined(), "distributed: all_reduced: the tensor is undefined");
  KILN_CHECK(op != ReduceOp::Mean || is_float(t.dtype()),
             "distributed: all_reduced: mean of {} (an integer "
             "dtype); use sum",
             t.type().str());
  Combine c = op == ReduceOp::Max ? Combine::Max : op == ReduceOp::Min ? Combine::Min : Combine::Sum;
  Tensor r = all_reduce_op(t, pg.id(), c);
  return op == ReduceOp::Mean ? r * (1.0 / pg.world_size()) : r;
}
int ProcessGroup::rank() const { return engines_->gloo->rank(); }
int ProcessGroup::world_size() const { return engines_->gloo->world_size(); }
Backend& ProcessGroup::backend() const { return *engines_->gloo; }
Backend& ProcessGroup::backend(Device device) { return engines_->of(device); }

Work all_reduce_async(ProcessGroup& pg, Tensor& t, ReduceOp op) {
  Tensor c = contiguous_operand(t, "all_reduce");
  KILN_CHECK(op != ReduceOp::Mean || is_float(t.dtype()),
             "distributed: all_reduce: mean of {} (an integer dtype); use "
             "sum",
             t.type().str());
  Work w = pg.backend(c.device()).all_reduce(c, op);
  if (c.impl() == t.impl()) return w;
  w.wait();  // reduced through a copy: written back before the caller sees it
  t.copy_(c);
  return w;
}

void all_reduce(ProcessGroup& pg, Tensor& t, ReduceOp op) { all_reduce_async(pg, t, op).wait(); }

Work broadcast_async(ProcessGroup& pg, Tensor& t, int root) {
  KILN_CHECK(root >= 0 && root < pg.world_size(), "distributed: broadcast: root {} is outside 0..{}", root,
             pg.world_size() - 1);
  Tensor c = contiguous_operand(t, "broadcast");
  Work w = pg.backend(c.device()).broadcast(c, root);
  if (c.impl() == t.impl()) return w;
  w.wait();
  t.copy_(c);
  return w;
}

void broadcast(ProcessGroup& pg, Tensor& t, int root) { broadcast_async(pg, t, root).wait(); }

Tensor all_gather(ProcessGroup& pg, const Tensor& t) {
  Tensor in = contiguous_operand(t, "all_gather");
  Dims shape = in.shape().vec();
  shape.insert(0, pg.world_size());
  Tensor out = empty(shape, in.dtype(), in.device());
  pg.backend(in.device()).all_gather(out, in).wait();
  return out;
}

Tensor reduce_scatter(ProcessGroup& pg, const Tensor& t, ReduceOp op) {
  Tensor in = contiguous_operand(t, "reduce_scatter");
  KILN_CHECK(in.dim() >= 1 && in.shape()[0] % pg.world_size() == 0,
             "distributed: reduce_scatter: dim 0 of {} must divide into {} blocks (one per rank)", in.type().str(),
             pg.world_size());
  KILN_CHECK(op != ReduceOp::Mean || is_float(in.dtype()),
             "distributed: reduce_scatter: mean of {} (an integer "
             "dtype); use sum",
             in.type().str());
  Dims shape = in.shape().vec();
  shape[0] /= pg.world_size();
  Tensor out = empty(shape, in.dtype(), in.device());
  pg.backend(in.device()).reduce_scatter(out, in, op).wait();
  return out;
}

void barrier(ProcessGroup& pg) { pg.backend().barrier().wait(); }

}  // namespace kiln::distributed
