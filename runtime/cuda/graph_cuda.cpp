// runtime/cuda/graph_cuda.cpp -- CUDA graphs: stream capture into a private memory pool, and
// replay (runtime/cuda_internal.h). cuda/graph.cpp decides what to capture.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/profiler.h"

namespace kiln::cuda {
namespace {

// The private pool of each stream being captured (a stream captures one graph at a time).
std::mutex g_mu;
std::map<uintptr_t, uintptr_t>& pools() {
  static auto* m = new std::map<uintptr_t, uintptr_t>;
  return *m;
}

}  // namespace

bool is_capturing(uintptr_t stream) {
  std::lock_guard<std::mutex> lock(g_mu);
  return pools().count(stream) != 0;
}

Stream capture_stream(int device) {
  static auto* pool = new HandlePool<CUstream>([](int d) {
    bind(d, "cuda graph capture");
    CUstream st = nullptr;
    check(driver()->cuStreamCreateWithPriority(&st, CU_STREAM_NON_BLOCKING, 0), "cuStreamCreateWithPriority");
    return st;
  });
  bind(device, "cuda graph capture");
  return Stream(device, reinterpret_cast<uintptr_t>(pool->get(device)));
}

void begin_capture(const Stream& stream) {
  KILN_CHECK(stream.handle() != 0,
             "cuda graph capture: cuda:{}'s default stream cannot be captured; capture a "
             "stream of cuda::Stream::create",
             stream.device_index());
  bind(stream.device_index(), "cuda graph capture");
  auto* st = reinterpret_cast<CUstream>(stream.handle());
  uintptr_t key = device_allocator(stream.device_index()).begin_private_pool(stream.handle());
  // Relaxed: the allocator may still call cuMemAlloc for the pool, which the stricter modes
  // forbid; calls that would wait for the captured stream fail in every mode.
  CUresult r = driver()->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (r != CUDA_SUCCESS) {
    device_allocator(stream.device_index()).end_private_pool(stream.handle());
    device_allocator(stream.device_index()).release_private_pool(key, stream.handle());
    check(r, "cuStreamBeginCapture");
  }
  std::lock_guard<std::mutex> lock(g_mu);
  pools()[stream.handle()] = key;
}

std::unique_ptr<CapturedGraph> end_capture(const Stream& stream, std::string* why) {
  int device = stream.device_index();
  bind(device, "cuda graph capture");
  uintptr_t key = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = pools().find(stream.handle());
    KILN_CHECK(it != pools().end(), "cuda graph capture: cuda:{}'s stream {:#x} is not being captured", device,
               stream.handle());
    key = it->second;
    pools().erase(it);
  }
  CachingAllocator& allocator = device_allocator(device);
  allocator.end_private_pool(stream.handle());
  auto* st = reinterpret_cast<CUstream>(stream.handle());
  CUgraph graph = nullptr;
  CUresult r = driver()->cuStreamEndCapture(st, &graph);
  CUgraphExec exec = nullptr;
  if (r == CUDA_SUCCESS) {
    r = driver()->cuGraphInstantiate(&exec, graph, 0);
    driver()->cuGraphDestroy(graph);
  }
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    driver()->cuGetErrorName(r, &name);
    *why = fmt::format("the capture failed: {}", name ? name : "unknown error");
    // Nothing of the capture ran; the blocks it took are ordinary again.
    allocator.release_private_pool(key, stream.handle());
    return nullptr;
  }
  return std::make_unique<CapturedGraph>(device, reinterpret_cast<uintptr_t>(exec), key, stream.handle());
}

void CapturedGraph::launch() const {
  bind(device_, "cuda graph launch");
  profiler::DeviceWork work;  // its kernels are named by the plan that captured them (name_kernel)
  CUstream stream = current(device_);
  check(driver()->cuGraphLaunch(reinterpret_cast<CUgraphExec>(exec_), stream), "cuGraphLaunch");
  std::lock_guard<std::mutex> lock(mu_);
  launched_.insert(reinterpret_cast<uintptr_t>(stream));
}

// Replays may still be queued: they finish before the pool's blocks can go to anyone else. It
// waits for the streams they were queued on, not the device: cuCtxSynchronize would end a
// capture another thread is making.
CapturedGraph::~CapturedGraph() {
  try {
    bind(device_, "cuda graph");
    for (uintptr_t s : launched_)
      check(driver()->cuStreamSynchronize(reinterpret_cast<CUstream>(s)), "cuStreamSynchronize");
    driver()->cuGraphExecDestroy(reinterpret_cast<CUgraphExec>(exec_));
    device_allocator(device_).release_private_pool(pool_, stream_);
  } catch (const Error&) {
    // The device failed (its error was reported where it happened); the pool stays reserved.
  }
}

}  // namespace kiln::cuda
