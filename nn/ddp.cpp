// nn/ddp.cpp -- DistributedDataParallel: buckets, the hooks that start their
// reductions, and the end-of-backward step that waits and hands out the averaged gradients.
#include "nn/ddp.h"

#include <fmt/format.h>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/collective.h"
#include "runtime/recorder.h"

namespace kiln::nn {

DistributedDataParallel::DistributedDataParallel(Module& module, distributed::ProcessGroup& pg, DdpOptions options)
    : module_(module), pg_(pg) {
  KILN_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0,
             "DistributedDataParallel: bucket sizes must be positive");
  {
    NoGradGuard no_grad;
    for (Tensor t : module.parameters()) distributed::broadcast(pg, t, 0);
    if (options.broadcast_buffers)
      for (auto& [name, t] : module.named_buffers()) distributed::broadcast(pg, t, 0);
  }
  for (Tensor p : module.parameters())
    if (p.requires_grad()) params_.push_back(p);
  KILN_CHECK(!params_.empty(), "DistributedDataParallel: the module has no parameter that requires grad");
  // Buckets in reverse registration order (the last layer's gradients come first), each of one
  // dtype on one device, closed when the next parameter would pass the cap.
  bucket_of_.resize(params_.size());
  offset_.resize(params_.size());
  auto cap = [&](size_t bucket) { return bucket == 0 ? options.first_bucket_bytes : options.bucket_bytes; };
  size_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    size_t size = static_cast<size_t>(p.numel()) * dtype_size(p.dtype());
    if (buckets_.empty() || buckets_.back().dtype != p.dtype() || buckets_.back().device != p.device() ||
        bytes + size > cap(buckets_.size() - 1)) {
      buckets_.emplace_back();
      buckets_.back().dtype = p.dtype();
      buckets_.back().device = p.device();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    offset_[k] = static_cast<size_t>(b.numel);
    b.params.push_back(k);
    b.numel += p.numel();
    bytes += size;
  }
  ready_.assign(params_.size(), 0);
  for (size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(
        autograd::register_post_accumulate_grad_hook(params_[k], [this, k](const Tensor&) { on_grad_ready(k); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (autograd::HookHandle& h : hooks_) h.remove();
  for (Bucket& b : buckets_)
    if (b.work) try {
        b.work->wait();
      } catch (const Error&) {
      }
}

Tensor DistributedDataParallel::operator()(const Tensor& x) {
  auto* m = dynamic_cast<UnaryModule*>(&module_);
  KILN_CHECK(m, "DistributedDataParallel: the module is no UnaryModule (one tensor in, one out); call it directly");
  return m->forward(x);
}

std::vector<std::vector<size_t>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<size_t>> r;
  for (const Bucket& b : buckets_) r.push_back(b.params);
  return r;
}

void DistributedDataParallel::on_grad_ready(size_t k) {
  if (!sync_) return;  // no_sync: the gradient accumulates locally
  if (!armed_) {
    // The first gradient of a synchronized backward: reset, and finish when it ends.
    armed_ = true;
    events_.clear();
    next_bucket_ = 0;
    std::fill(ready_.begin(), ready_.end(), 0);
    for (Bucket& b : buckets_) b.pending = b.params.size(), b.flat = Tensor(), b.work.reset();
    autograd::queue_callback([this] { finish(); });
  }
  if (ready_[k]) {
    // The backward that armed us never ended: an error cut it short (its reductions may be
    // half issued, so the ranks may disagree). Start clean, but say so.
    armed_ = false;
    throw Error(
        fmt::format("DistributedDataParallel: parameter {} ({}) got a gradient again before the last "
                    "backward's reductions finished: that backward was cut short by an error; restart "
                    "the step on every rank",
                    k, params_[k].type().str()));
  }
  ready_[k] = 1;
  events_.push_back({DdpEvent::GradReady, k});
  --buckets_[bucket_of_[k]].pending;
  start_ready_buckets();
}

// Buckets start in order, so every rank issues the same reductions in the same order.
void DistributedDataParallel::start_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) start(buckets_[next_bucket_++]);
}

void DistributedDataParallel::start(Bucket& b) {
  NoGradGuard no_grad;  // a create_graph backward's gradients have history; the reduction has none
  // A parameter that got no gradient on this rank (unused in its forward) adds zeros.
  std::vector<Tensor> pieces;
  for (size_t k : b.params) {
    Tensor g = params_[k].grad();
    pieces.push_back(g.defined() ? g.reshape({params_[k].numel()}) : zeros({params_[k].numel()}, b.dtype, b.device));
  }
  Tensor flat = pieces.size() == 1 ? pieces[0].clone() : cat(pieces, 0);  // never a grad's own storage
  events_.push_back({DdpEvent::BucketStarted, static_cast<size_t>(&b - buckets_.data())});
  if (active_recorder()) {
    // Traced: the reduction is an op of the step's graph, run in order at each call.
    b.flat = all_reduce_op(flat, pg_.id(), Combine::Sum);
    return;
  }
  b.flat = flat;
  b.work = distributed::all_reduce_async(pg_, b.flat, distributed::ReduceOp::Sum);
}

void DistributedDataParallel::finish() {
  armed_ = false;
  events_.push_back({DdpEvent::BackwardEnded, 0});
  // Buckets with parameters backward never reached start now, in order.
  for (Bucket& b : buckets_) b.pending = 0;
  start_ready_buckets();
  NoGradGuard no_grad;
  double scale = 1.0 / pg_.world_size();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    if (b.work) b.work->wait();
    events_.push_back({DdpEvent::BucketReduced, i});
    Tensor avg = b.flat * scale;
    for (size_t k : b.params) {
      int64_t at = static_cast<int64_t>(offset_[k]);
      params_[k].set_grad(avg.slice(0, at, at + params_[k].numel()).reshape(params_[k].shape()));
    }
    b.flat = Tensor();
    b.work.reset();
  }
}

}  // namespace kiln::nn
