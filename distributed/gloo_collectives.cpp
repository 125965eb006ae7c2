// distributed/gloo_collectives.cpp -- the Gloo engine's collectives on CPU tensors (TCP):
// every collective on one worker thread in issue order, its errors turned into kiln::Errors
// that name the collective (and, through the check, the ranks that did not arrive).
#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "distributed/gloo_backend.h"
#include "distributed/work.h"
#include "runtime/api.h"
#include "runtime/autograd_meta.h"

namespace kiln::distributed::detail {
namespace {

// The element types Gloo reduces, by kiln dtype.
template <class F> auto by_dtype(DType t, const char* what, F f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::U8: return f(uint8_t{});
    default:
      throw Error(fmt::format("distributed: {}: dtype {} is not supported by the Gloo backend (f32, f64, i32, i64, u8)",
                              what, dtype_name(t)));
  }
}

template <class T> gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);  // Gloo's untyped form of each
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return static_cast<Fn>(&gloo::sum<T>);
    case ReduceOp::Max: return static_cast<Fn>(&gloo::max<T>);
    case ReduceOp::Min: return static_cast<Fn>(&gloo::min<T>);
  }
  return static_cast<Fn>(&gloo::sum<T>);
}

}  // namespace

GlooBackend::~GlooBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

Work GlooBackend::all_reduce(Tensor t, ReduceOp op) {
  return enqueue("all_reduce", t, [this, t, op](uint32_t tag) mutable {
    reduce_in_place(t, op, tag, "all_reduce");
    if (op == ReduceOp::Mean) t.div_(static_cast<double>(o_.world_size));
  });
}

Work GlooBackend::broadcast(Tensor t, int root) {
  return enqueue("broadcast", t, [this, t, root](uint32_t tag) {
    by_dtype(t.dtype(), "broadcast", [&](auto zero) {
      using T = decltype(zero);
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(static_cast<T*>(t.data_ptr()), static_cast<size_t>(t.numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(o_.timeout);
      gloo::broadcast(opts);
      return 0;
    });
  });
}

Work GlooBackend::all_gather(Tensor out, Tensor in) {
  return enqueue("all_gather", in, [this, out, in](uint32_t tag) {
    by_dtype(in.dtype(), "all_gather", [&](auto zero) {
      using T = decltype(zero);
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(static_cast<T*>(in.data_ptr()), static_cast<size_t>(in.numel()));
      opts.setOutput(static_cast<T*>(out.data_ptr()), static_cast<size_t>(out.numel()));
      opts.setTag(tag);
      opts.setTimeout(o_.timeout);
      gloo::allgather(opts);
      return 0;
    });
  });
}

// Gloo's reduce-scatter is an older, float-only algorithm class; this is its all-reduce and
// this rank's block (twice the traffic of a true reduce-scatter; fine for the CPU engine).
Work GlooBackend::reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
  return enqueue("reduce_scatter", in, [this, out, in, op](uint32_t tag) mutable {
    Tensor all = in.clone();
    reduce_in_place(all, op, tag, "reduce_scatter");
    int64_t block = all.shape()[0] / o_.world_size;
    Tensor mine = all.narrow(0, o_.rank * block, block);
    if (op == ReduceOp::Mean) mine = mine / static_cast<double>(o_.world_size);
    out.copy_(mine);
  });
}

Work GlooBackend::barrier() {
  return enqueue("barrier", Tensor(), [this](uint32_t tag) {
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(tag);
    opts.setTimeout(o_.timeout);
    gloo::barrier(opts);
  });
}

// Gloo's all-reduce over t's elements, in place (a mean is its sum here).
void GlooBackend::reduce_in_place(const Tensor& t, ReduceOp op, uint32_t tag, const char* what) {
  by_dtype(t.dtype(), what, [&](auto zero) {
    using T = decltype(zero);
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(static_cast<T*>(t.data_ptr()), static_cast<size_t>(t.numel()));
    opts.setReduceFunction(reduce_fn<T>(op));
    opts.setTag(tag);
    opts.setTimeout(o_.timeout);
    gloo::allreduce(opts);
    return 0;
  });
}

Work GlooBackend::enqueue(const char* name, Tensor t, std::function<void(uint32_t)> run) {
  auto state = std::make_shared<Work::State>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({name, std::move(t), std::move(run), state});
  }
  cv_.notify_all();
  return Work(state);
}

void GlooBackend::run() {
  GradModeGuard no_grad(false);  // collectives write gradients and weights; nothing is taped
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    uint64_t seq = ++seq_;
    std::string error;
    bool failed = true;
    try {
      if (o_.check) check(op, seq);
      op.run(next_tag_++);
      failed = false;
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = failure(op.name, seq, e.what());
    } catch (...) {
      error = failure(op.name, seq, "an unknown exception");
    }
    op.state->finish(failed, std::move(error));
  }
}

}  // namespace kiln::distributed::detail
