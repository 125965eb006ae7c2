// tests/cuda/host/stream_cuda.cpp -- the host CUDA driver's streams, events, stream capture
// and graphs (its state: driver_cuda.h). Streams are ordered queues, each run by a worker
// thread of its own; only events order streams. Capture records what would be queued on a
// stream into a graph, and a launched graph queues all of it again.
#include <cstring>

#include "tests/cuda/host/driver_cuda.h"

using namespace host_driver;

extern "C" {

CUresult cuStreamCreateWithPriority(CUstream* s, unsigned int, int) {
  int d = current_device();
  auto* st = new Stream(d);
  std::lock_guard<std::mutex> lock(host().mu);
  host().devices[static_cast<size_t>(d)].streams.push_back(st);
  *s = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s) {
  if (stream_of(s)->refuse_while_captured()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  tally(g_synchronizations);
  stream_of(s)->wait_idle();
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream s) {
  if (stream_of(s)->refuse_while_captured()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return stream_of(s)->is_idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  auto* ev = new Event;
  ev->timing = !(flags & CU_EVENT_DISABLE_TIMING);
  g_live_events.fetch_add(1, std::memory_order_relaxed);
  *e = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent e) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  release(reinterpret_cast<Event*>(e));
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream s) {
  auto* ev = reinterpret_cast<Event*>(e);
  uint64_t generation;
  Stream* st = stream_of(s);
  {
    std::lock_guard<std::mutex> lock(st->mu);
    std::lock_guard<std::mutex> event_lock(ev->mu);
    ev->captured_in = st->capture;
    if (st->capture) return CUDA_SUCCESS;  // a node of the graph: it orders nothing outside
    generation = ++ev->recorded;
  }
  st->push([ev = retain(ev), generation] {
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      ev->completed = std::max(ev->completed, generation);
      ev->when = Clock::now();
      ev->cv.notify_all();
    }
    release(ev);
  });
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent e) {
  auto* ev = reinterpret_cast<Event*>(e);
  std::lock_guard<std::mutex> lock(ev->mu);
  return ev->completed >= ev->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e) {
  auto* ev = reinterpret_cast<Event*>(e);
  tally(g_synchronizations);
  std::unique_lock<std::mutex> lock(ev->mu);
  ev->cv.wait(lock, [&] { return ev->completed >= ev->recorded; });
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (!a->timing || !b->timing) return CUDA_ERROR_INVALID_VALUE;
  if (cuEventQuery(start) != CUDA_SUCCESS || cuEventQuery(end) != CUDA_SUCCESS) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return CUDA_SUCCESS;
}

// The stream waits, in its queue, until the event's current recording has completed.
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int) {
  auto* ev = reinterpret_cast<Event*>(e);
  uint64_t generation;
  Stream* st = stream_of(s);
  {
    std::lock_guard<std::mutex> lock(st->mu);
    std::lock_guard<std::mutex> event_lock(ev->mu);
    if (st->capture) {  // only events of the same capture order work within it
      if (ev->captured_in == st->capture) return CUDA_SUCCESS;
      st->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    generation = ev->recorded;
  }
  st->push([ev = retain(ev), generation] {
    {
      std::unique_lock<std::mutex> lock(ev->mu);
      ev->cv.wait(lock, [&] { return ev->completed >= generation; });
    }
    release(ev);
  });
  return CUDA_SUCCESS;
}

// Stream capture (global, thread-local or relaxed mode alike: the host CUDA checks the calls
// on the captured stream only).
CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode) {
  if (!s) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // as the legacy default stream
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->capture) return CUDA_ERROR_ILLEGAL_STATE;
  st->capture = new Graph;
  st->invalidated = false;
  st->capturer = std::this_thread::get_id();
  return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> lock(st->mu);
  if (!st->capture) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* g = st->capture;
  st->capture = nullptr;
  if (st->invalidated) {
    delete g;
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  Stream* st = stream_of(s);
  std::lock_guard<std::mutex> lock(st->mu);
  *status = !st->capture      ? CU_STREAM_CAPTURE_STATUS_NONE
            : st->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                              : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  *exec = reinterpret_cast<CUgraphExec>(new Graph(*reinterpret_cast<Graph*>(graph)));
  return CUDA_SUCCESS;
}

// The host CUPTI records the replayed work as the graph's, under this call's correlation id.
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  const Graph* g = reinterpret_cast<Graph*>(exec);
  const uint32_t correlation = host_cupti::begin_call(), id = g->id;
  for (const std::function<void()>& task : g->tasks)
    stream_of(s)->push([task, id, correlation] { host_cupti::run_replayed(id, correlation, task); });
  return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  delete reinterpret_cast<Graph*>(exec);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<Graph*>(graph);
  return CUDA_SUCCESS;
}

// Not the driver's: the events made and not yet gone, for tests of event leaks.
long long kiln_host_live_events() { return g_live_events.load(std::memory_order_relaxed); }

}  // extern "C"
