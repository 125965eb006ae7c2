// tests/cuda/host/driver_cuda.h -- the host CUDA driver's state, shared by its two files:
// driver_cuda.cpp (devices, contexts, memory, copies, modules, launches) and stream_cuda.cpp
// (streams, events, stream capture, graphs). See driver_cuda.cpp for what it emulates.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/cuda/host/abi_cuda.h"
#include "tests/cuda/host/activity_cuda.h"

namespace host_driver {

using Clock = std::chrono::steady_clock;

// The calls that made the host wait for a device (context, stream and event synchronizations,
// copies into pageable memory), the copies from pageable memory (staged by the host), and the
// copies between device buffers queued: what a GPU makes slow, counted for tests
// (kiln_host_cuda_synchronizations, kiln_host_cuda_pageable_uploads,
// kiln_host_cuda_device_copies).
inline std::atomic<long long> g_synchronizations{0}, g_pageable_uploads{0}, g_device_copies{0};
inline void tally(std::atomic<long long>& c) { c.fetch_add(1, std::memory_order_relaxed); }

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// The C library's own swapcontext (abi_cuda.h, KilnHostLaunch::swap): looked up in libc.so.6,
// not by name in the process, where a sanitizer's interceptor comes first.
using SwapContext = int (*)(ucontext_t*, const ucontext_t*);
inline SwapContext libc_swapcontext() {
  static const SwapContext swap = [] {
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void* f = libc ? dlsym(libc, "swapcontext") : nullptr;
    return f ? reinterpret_cast<SwapContext>(f) : &swapcontext;
  }();
  return swap;
}

struct Event {
  std::mutex mu;
  const void* captured_in = nullptr;  // the graph its last recording went into, if any
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;  // generations: done when completed == recorded
  Clock::time_point when;
  bool timing = true;
  // The handle's reference and each queued task's: destroyed with work still queued on it (as
  // a driver allows), it goes when that work has run.
  std::atomic<int> refs{1};
};

// Events made and not yet destroyed (with their queued work done): what a test of a leak reads
// through kiln_host_live_events().
inline std::atomic<long long> g_live_events{0};

inline Event* retain(Event* e) {
  e->refs.fetch_add(1, std::memory_order_relaxed);
  return e;
}
inline void release(Event* e) {
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete e;
    g_live_events.fetch_sub(1, std::memory_order_relaxed);
  }
}

// What a stream capture recorded: the tasks, in order.
struct Graph {
  std::vector<std::function<void()>> tasks;
  uint32_t id = next_id();  // CUPTI's graphId (an instantiated graph gets its own)
  Graph() = default;
  Graph(const Graph& g) : tasks(g.tasks) {}
  static uint32_t next_id() {
    static std::atomic<uint32_t> n{1};
    return n.fetch_add(1);
  }
};

struct Stream;
// The stream whose worker is running the current task (a graph's tasks run on any stream).
extern thread_local Stream* t_worker;

// An ordered queue of work and the thread that runs it.
struct Stream {
  int device = 0;
  uint32_t id = next_id();  // CUPTI's streamId
  static uint32_t next_id() {
    static std::atomic<uint32_t> n{1};
    return n.fetch_add(1);
  }
  std::mutex mu;
  std::condition_variable cv, idle;
  std::deque<std::function<void()>> tasks;
  bool busy = false;
  Graph* capture = nullptr;  // while captured: where its work goes instead
  bool invalidated = false;  // the capture met a call it does not allow
  std::thread::id capturer;  // the thread capturing it
  std::thread worker;
  // The kernels' scratch (abi_cuda.h), touched by the worker alone and kept for the next launch.
  std::vector<char*> stacks;
  struct alignas(128) SharedChunk {  // dynamic shared memory starts 128-byte aligned, as on a device
    unsigned char bytes[128];
  };
  std::vector<SharedChunk> shared;

  explicit Stream(int d) : device(d) {
    worker = std::thread([this] { run(); });
    worker.detach();  // streams live as long as the process, as kiln's do
  }
  void push(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu);
    if (capture) {
      // Another thread's work would land in this thread's graph (not run, replayed with it):
      // on a GPU a silent corruption, here the end of the capture.
      if (std::this_thread::get_id() != capturer) invalidated = true;
      capture->tasks.push_back(std::move(task));
      return;
    }
    tasks.push_back(std::move(task));
    cv.notify_one();
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu);
    idle.wait(lock, [&] { return tasks.empty() && !busy; });
  }
  bool is_idle() {
    std::lock_guard<std::mutex> lock(mu);
    return tasks.empty() && !busy;
  }
  // A call that would wait for this stream: refused, and the capture is over, while captured.
  bool refuse_while_captured() {
    std::lock_guard<std::mutex> lock(mu);
    if (capture) invalidated = true;
    return capture != nullptr;
  }
  // The OS threads beside the worker that run a launch's blocks with it (abi_cuda.h,
  // KILN_HOST_CUDA_WORKERS), each with scratch of its own; idle between launches.
  struct Helper {
    std::vector<char*> stacks;
    std::vector<SharedChunk> shared;
  };
  std::vector<std::unique_ptr<Helper>> helpers;
  std::mutex helper_mu;
  std::condition_variable helper_go, helper_done;
  uint64_t round = 0;    // launches handed to the helpers
  unsigned pending = 0;  // helpers still running this round's blocks
  void (*helper_body)(void*, char* const*, unsigned char*) = nullptr;
  void* helper_ctx = nullptr;

  // Makes the scratch a launch needs; runs on the worker.
  void prepare(KilnHostLaunch& l) {
    grow_scratch(stacks, shared, l);
    l.stacks = stacks.data();
    l.shared = shared.data()->bytes;
    l.swap = libc_swapcontext();
    static const int workers = env_int("KILN_HOST_CUDA_WORKERS", 1);
    l.workers = static_cast<unsigned>(workers < 1 ? 1 : workers);
    l.run_on_workers = [](const KilnHostLaunch* launch, void (*body)(void*, char* const*, unsigned char*), void* ctx) {
      static_cast<Stream*>(launch->pool)->run_helpers(*launch, body, ctx);
    };
    l.pool = this;
  }
  // body(ctx, ...) on the worker and on l.workers - 1 helpers at once; returns when all have.
  void run_helpers(const KilnHostLaunch& l, void (*body)(void*, char* const*, unsigned char*), void* ctx) {
    const unsigned n = l.workers - 1;
    while (helpers.size() < n) {
      helpers.push_back(std::make_unique<Helper>());
      Helper* h = helpers.back().get();
      uint64_t now;
      {
        std::lock_guard<std::mutex> lock(helper_mu);
        now = round;
      }
      std::thread([this, h, now] { help(*h, now); }).detach();  // lives as long as its stream
    }
    for (auto& h : helpers) grow_scratch(h->stacks, h->shared, l);  // (they are idle)
    {
      std::lock_guard<std::mutex> lock(helper_mu);
      helper_body = body, helper_ctx = ctx, pending = n;
      ++round;
    }
    helper_go.notify_all();
    body(ctx, l.stacks, l.shared);
    std::unique_lock<std::mutex> lock(helper_mu);
    helper_done.wait(lock, [&] { return pending == 0; });
  }
  void help(Helper& h, uint64_t seen) {
    for (;;) {
      void (*body)(void*, char* const*, unsigned char*);
      void* ctx;
      {
        std::unique_lock<std::mutex> lock(helper_mu);
        helper_go.wait(lock, [&] { return round != seen; });
        seen = round, body = helper_body, ctx = helper_ctx;
      }
      body(ctx, h.stacks.data(), h.shared.data()->bytes);
      std::lock_guard<std::mutex> lock(helper_mu);
      if (--pending == 0) helper_done.notify_all();
    }
  }
  // Stacks for each thread of l's blocks and its shared memory, grown as launches need.
  static void grow_scratch(std::vector<char*>& stacks, std::vector<SharedChunk>& shared, const KilnHostLaunch& l) {
    size_t threads = size_t{l.block[0]} * l.block[1] * l.block[2];
    while (stacks.size() < threads) {
      // Twice the size, then trimmed to an aligned stack (a kernel's thread finds its state from
      // its stack pointer).
      const size_t n = KILN_HOST_STACK_BYTES;
      void* m = mmap(nullptr, 2 * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) {
        std::fprintf(stderr, "host CUDA: no memory for a kernel thread's stack\n");
        std::abort();
      }
      auto begin = reinterpret_cast<uintptr_t>(m), aligned = (begin + n - 1) / n * n;
      if (aligned > begin) munmap(m, aligned - begin);
      if (begin + 2 * n > aligned + n) munmap(reinterpret_cast<void*>(aligned + n), begin + 2 * n - aligned - n);
      stacks.push_back(reinterpret_cast<char*>(aligned));
    }
    if (shared.size() * 128 < l.shared_bytes + 16) shared.resize((l.shared_bytes + 16 + 127) / 128);
  }
  void run() {
    t_worker = this;
    int delay = env_int("KILN_HOST_CUDA_DELAY_US", 0);
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !tasks.empty(); });
        task = std::move(tasks.front());
        tasks.pop_front();
        busy = true;
      }
      if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
      task();
      std::lock_guard<std::mutex> lock(mu);
      busy = false;
      if (tasks.empty()) idle.notify_all();
    }
  }
};

struct Device {
  size_t budget = 0, used = 0;
  std::map<uintptr_t, size_t> blocks;  // live allocations
  Stream* default_stream = nullptr;
  std::vector<Stream*> streams;  // every stream of the device, the default one first
};

struct Context {
  int device;
};

struct Function {
  KilnHostEntry entry = nullptr;
  std::string name;  // the kernel's, for the host CUPTI's records
};

struct Module {
  void* lib = nullptr;
  std::vector<std::unique_ptr<Function>> functions;  // the handles given out, freed with it
};

struct Host {
  std::mutex mu;
  std::vector<Device> devices;
  std::vector<Context> contexts;
  std::map<void*, size_t> pinned;
};

// The process's devices and contexts (made on first use).
Host& host();

// Initial-exec: this library is dlopen'd, and clang 14's LeakSanitizer misreads dynamic TLS
// (abi_cuda.h); eight bytes of glibc's static TLS surplus hold it instead.
extern __attribute__((tls_model("initial-exec"))) thread_local Context* t_context;

inline int current_device() { return t_context ? t_context->device : 0; }

// The stream a handle names: 0 is the current context's default stream.
inline Stream* stream_of(CUstream s) {
  return s ? reinterpret_cast<Stream*>(s) : host().devices[static_cast<size_t>(current_device())].default_stream;
}

// Whether p lies in memory from cuMemHostAlloc.
bool is_pinned(const void* p);

// Whether [p, p + n) lies in one live allocation of some device.
bool is_device_range(CUdeviceptr p, size_t n);

// A task queued on stream `s` by a driver call, recorded by the host CUPTI as `tag` says when
// it runs while recording (tests/cuda/host/activity_cuda.h).
inline host_cupti::Tag work_tag(host_cupti::Work kind, Stream* s) {
  host_cupti::Tag t;
  t.kind = kind;
  t.device = s->device;
  t.stream = s->id;
  t.correlation = host_cupti::begin_call();
  return t;
}

}  // namespace host_driver
