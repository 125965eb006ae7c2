// tests/cuda/host/driver_cuda.cpp -- the host CUDA's driver: the subset of the CUDA driver API
// kiln calls, with the prototypes of cuda.h, on host memory. kiln loads it instead of
// libcuda.so.1 when KILN_CUDA_DRIVER names it, through the same dlopen path.
//
// Streams are ordered queues, each run by a worker thread of its own, so work really runs
// after the call that queued it returns, in stream order, and only events order streams.
// KILN_HOST_CUDA_DELAY_US delays every queued task, so a missing synchronization shows as a
// wrong result instead of a lucky one. KILN_HOST_CUDA_HOST_ONLY=1 checks and counts kernel
// launches without running them: what a launch costs the host, timed alone (the benchmarks'
// eager dispatch cases), with results left unwritten. Devices (KILN_HOST_CUDA_DEVICES, default 2) have
// KILN_HOST_CUDA_MEMORY_MB each (default 4096); new device memory is filled with 0xff bytes
// (NaN for floats), so reading memory nobody wrote shows too. Modules are host cubins
// (nvrtc_cuda.cpp), whose kernels run their grid on the stream's worker.
//
// Stream capture records what would be queued on a stream into a graph instead of running it;
// an instantiated graph queues all of it again at each launch. As on a GPU, a call that would
// wait for a capturing stream (synchronizing it, its context or a pageable copy) fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, and so does waiting on
// an event recorded outside it.
#include "tests/cuda/host/driver_cuda.h"

#include <cstring>

#include "tests/cuda/host/queue_cuda.h"

namespace host_driver {

thread_local Stream* t_worker = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local Context* t_context = nullptr;

Host& host() {
  static Host* h = [] {
    auto* x = new Host;
    int n = env_int("KILN_HOST_CUDA_DEVICES", 2);
    size_t budget = static_cast<size_t>(env_int("KILN_HOST_CUDA_MEMORY_MB", 4096)) << 20;
    x->devices.resize(static_cast<size_t>(n));
    x->contexts.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      x->devices[static_cast<size_t>(i)].budget = budget;
      x->devices[static_cast<size_t>(i)].default_stream = new Stream(i);
      x->devices[static_cast<size_t>(i)].streams.push_back(x->devices[static_cast<size_t>(i)].default_stream);
      x->contexts[static_cast<size_t>(i)].device = i;
    }
    return x;
  }();
  return *h;
}

bool is_pinned(const void* p) {
  Host& h = host();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.pinned.upper_bound(const_cast<void*>(p));
  if (it == h.pinned.begin()) return false;
  --it;
  return static_cast<const char*>(p) < static_cast<char*>(it->first) + it->second;
}

// Whether [p, p + n) lies in one live allocation of some device.
bool is_device_range(CUdeviceptr p, size_t n) {
  Host& h = host();
  std::lock_guard<std::mutex> lock(h.mu);
  for (Device& d : h.devices) {
    auto it = d.blocks.upper_bound(p);
    if (it == d.blocks.begin()) continue;
    --it;
    if (p >= it->first && p + n <= it->first + it->second) return true;
  }
  return false;
}

// The host CUPTI's tags of a copy and a memset (the task is recorded when it runs).
host_cupti::Tag copy_tag(Stream* s, uint8_t kind, size_t bytes) {
  host_cupti::Tag t = work_tag(host_cupti::Work::Memcpy, s);
  t.copy_kind = kind;
  t.bytes = bytes;
  return t;
}
host_cupti::Tag memset_tag(Stream* s, size_t bytes) {
  host_cupti::Tag t = work_tag(host_cupti::Work::Memset, s);
  t.bytes = bytes;
  return t;
}

}  // namespace host_driver

using namespace host_driver;

void kiln_host_enqueue(CUstream stream, std::function<void()> task, const char* kernel) {
  Stream* st = stream_of(stream);
  if (!kernel) return st->push(std::move(task));
  host_cupti::Tag t = work_tag(host_cupti::Work::Kernel, st);  // a library's kernel, for the host CUPTI
  t.name = kernel;
  st->push(host_cupti::tagged(std::move(t), std::move(task)));
}
bool kiln_host_reserve(long long bytes, int device) {
  Host& h = host();
  std::lock_guard<std::mutex> lock(h.mu);
  Device& d = h.devices[static_cast<size_t>(device < 0 ? current_device() : device)];
  if (bytes > 0 && d.used + static_cast<size_t>(bytes) > d.budget) return false;
  d.used = static_cast<size_t>(static_cast<long long>(d.used) + bytes);
  return true;
}
int kiln_host_current_device() { return current_device(); }
bool kiln_host_device_range(const void* p, size_t n) { return is_device_range(reinterpret_cast<CUdeviceptr>(p), n); }

extern "C" {

CUresult cuInit(unsigned int) { return host().devices.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS; }

// KILN_HOST_CUDA_DRIVER_VERSION (12080: CUDA 12.8) makes the driver an older one, for the tests
// of which libraries kiln may load beside it.
CUresult cuDriverGetVersion(int* v) {
  *v = env_int("KILN_HOST_CUDA_DRIVER_VERSION", CUDA_VERSION);
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** s) {
  switch (error) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_READY: *s = "CUDA_ERROR_NOT_READY"; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case CUDA_ERROR_ILLEGAL_STATE: *s = "CUDA_ERROR_ILLEGAL_STATE"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; break;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: *s = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"; break;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: *s = "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** s) {
  switch (error) {
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *s = "operation not permitted when stream is capturing"; break;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: *s = "operation failed due to a previous error during capture"; break;
    default: *s = "host CUDA error"; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* n) {
  *n = static_cast<int>(host().devices.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(host().devices.size())) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  std::snprintf(name, static_cast<size_t>(len), "kiln host CUDA device %d", d);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  const int cc = env_int("KILN_HOST_CUDA_CC", 90);  // another architecture, for tests of NVRTC's targets
  switch (a) {                                      // an sm_90-like device
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 << 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 227 << 10; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 0x7fffffff; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    // An H100's clocks and bus (its memory: 3.35 TB/s), for the profiler's peaks.
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;         // kHz
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;  // kHz
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t* bytes, CUdevice d) {
  *bytes = host().devices[static_cast<size_t>(d)].budget;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  if (d < 0 || d >= static_cast<int>(host().devices.size())) return CUDA_ERROR_INVALID_DEVICE;
  *c = reinterpret_cast<CUcontext>(&host().contexts[static_cast<size_t>(d)]);
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c) {
  t_context = reinterpret_cast<Context*>(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* c) {
  *c = reinterpret_cast<CUcontext>(t_context);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  Device& d = host().devices[static_cast<size_t>(current_device())];
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(host().mu);
    streams = d.streams;
  }
  bool captured = false;
  for (Stream* s : streams) captured = s->refuse_while_captured() || captured;
  if (captured) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  tally(g_synchronizations);
  for (Stream* s : streams) s->wait_idle();
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  Host& h = host();
  Device& d = h.devices[static_cast<size_t>(current_device())];
  {
    std::lock_guard<std::mutex> lock(h.mu);
    if (d.used + bytes > d.budget) return CUDA_ERROR_OUT_OF_MEMORY;
    d.used += bytes;
  }
  void* m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(m, 0xff, bytes);
  std::lock_guard<std::mutex> lock(h.mu);
  *p = reinterpret_cast<CUdeviceptr>(m);
  d.blocks[*p] = bytes;
  return CUDA_SUCCESS;
}

// As the driver's, it waits for the device's work first (kernels queued may still use the
// memory): the cost that makes a caching allocator worth having.
CUresult cuMemFree(CUdeviceptr p) {
  Host& h = host();
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(h.mu);
    for (Device& d : h.devices)
      if (d.blocks.count(p)) streams = d.streams;
  }
  for (Stream* s : streams) s->wait_idle();
  std::lock_guard<std::mutex> lock(h.mu);
  for (Device& d : h.devices) {
    auto it = d.blocks.find(p);
    if (it == d.blocks.end()) continue;
    d.used -= it->second;
    d.blocks.erase(it);
    std::free(reinterpret_cast<void*>(p));
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemGetInfo(size_t* free, size_t* total) {
  Host& h = host();
  std::lock_guard<std::mutex> lock(h.mu);
  Device& d = h.devices[static_cast<size_t>(current_device())];
  *free = d.budget - d.used;
  *total = d.budget;
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int) {
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!*p) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(host().mu);
  host().pinned[*p] = bytes;
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void* p) {
  std::lock_guard<std::mutex> lock(host().mu);
  if (!host().pinned.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  return CUDA_SUCCESS;
}

// From pageable host memory the source is read before the call returns (as the driver stages
// it); from pinned memory, when the copy runs.
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  if (!is_device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  if (!is_pinned(src) && stream_of(s)->refuse_while_captured()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  host_cupti::Tag t = copy_tag(stream_of(s), CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, n);
  if (is_pinned(src)) {
    stream_of(s)->push(host_cupti::tagged(t, [=] { std::memcpy(reinterpret_cast<void*>(dst), src, n); }));
  } else {
    tally(g_pageable_uploads);
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    stream_of(s)->push(host_cupti::tagged(t, [=] { std::memcpy(reinterpret_cast<void*>(dst), staged->data(), n); }));
  }
  return CUDA_SUCCESS;
}

// Into pageable host memory the call returns when the copy is done; into pinned memory, at
// once.
CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  if (!is_device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = stream_of(s);
  if (!is_pinned(dst) && st->refuse_while_captured()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  st->push(host_cupti::tagged(copy_tag(st, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, n),
                              [=] { std::memcpy(dst, reinterpret_cast<const void*>(src), n); }));
  if (!is_pinned(dst)) {
    tally(g_synchronizations);
    st->wait_idle();
  }
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  if (!is_device_range(dst, n) || !is_device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  tally(g_device_copies);
  stream_of(s)->push(host_cupti::tagged(copy_tag(stream_of(s), CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, n), [=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  }));
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  if (!is_device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  stream_of(s)->push(
      host_cupti::tagged(memset_tag(stream_of(s), n), [=] { std::memset(reinterpret_cast<void*>(dst), v, n); }));
  return CUDA_SUCCESS;
}

// As a GPU's driver: the destination aligned to the element.
CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
  if (dst % 2 != 0 || !is_device_range(dst, 2 * n)) return CUDA_ERROR_INVALID_VALUE;
  stream_of(s)->push(host_cupti::tagged(memset_tag(stream_of(s), 2 * n),
                                        [=] { std::fill_n(reinterpret_cast<unsigned short*>(dst), n, v); }));
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  if (dst % 4 != 0 || !is_device_range(dst, 4 * n)) return CUDA_ERROR_INVALID_VALUE;
  stream_of(s)->push(host_cupti::tagged(memset_tag(stream_of(s), 4 * n),
                                        [=] { std::fill_n(reinterpret_cast<unsigned int*>(dst), n, v); }));
  return CUDA_SUCCESS;
}

// `height` rows of `width` 32-bit values, `pitch` bytes apart.
CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t width, size_t height, CUstream s) {
  if (dst % 4 != 0 || (height > 1 && (pitch % 4 != 0 || pitch < 4 * width))) return CUDA_ERROR_INVALID_VALUE;
  if (height > 0 && !is_device_range(dst, pitch * (height - 1) + 4 * width)) return CUDA_ERROR_INVALID_VALUE;
  stream_of(s)->push(host_cupti::tagged(memset_tag(stream_of(s), 4 * width * height), [=] {
    for (size_t r = 0; r < height; ++r) std::fill_n(reinterpret_cast<unsigned int*>(dst + r * pitch), width, v);
  }));
  return CUDA_SUCCESS;
}

// What a loaded module takes of its device's memory (code and constant banks on a GPU).
constexpr long long kModuleBytes = 1 << 20;

// A host cubin: the magic, a u64 size, then a shared object, loaded from a file of a name of
// its own (dlopen hands back an already loaded library of the same name). The file is removed
// once loaded, unless KILN_HOST_CUDA_MODULE_DIR names a folder to keep it in: a sanitizer's
// report then names the kernel and its lines (scripts/sanitize.sh).
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  const char* p = static_cast<const char*>(image);
  if (std::memcmp(p, KILN_HOST_CUBIN_MAGIC, KILN_HOST_CUBIN_MAGIC_SIZE) != 0) return CUDA_ERROR_INVALID_IMAGE;
  uint64_t size = 0;
  std::memcpy(&size, p + KILN_HOST_CUBIN_MAGIC_SIZE, sizeof size);
  const char* tmp = std::getenv("TMPDIR");
  const char* keep = std::getenv("KILN_HOST_CUDA_MODULE_DIR");
  const bool kept = keep && *keep;
  std::string path = (kept ? std::string(keep) : std::string(tmp && *tmp ? tmp : "/tmp")) + "/kiln-host-module-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) return CUDA_ERROR_INVALID_IMAGE;
  const char* so = p + KILN_HOST_CUBIN_MAGIC_SIZE + sizeof size;
  bool written = true;
  for (uint64_t done = 0; written && done < size;) {
    ssize_t k = ::write(fd, so + done, size - done);
    written = k > 0;
    if (written) done += static_cast<uint64_t>(k);
  }
  ::close(fd);
  void* lib = written ? dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!lib && written) std::fprintf(stderr, "host CUDA: cannot load a module: %s\n", dlerror());
  if (!kept) ::unlink(path.c_str());
  if (!lib) return CUDA_ERROR_INVALID_IMAGE;
  if (!kiln_host_reserve(kModuleBytes)) {
    dlclose(lib);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *m = reinterpret_cast<CUmodule>(new Module{lib, {}});
  return CUDA_SUCCESS;
}

// Its functions go with it, as the driver's do.
CUresult cuModuleUnload(CUmodule m) {
  auto* mod = reinterpret_cast<Module*>(m);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  dlclose(mod->lib);
  delete mod;
  kiln_host_reserve(-kModuleBytes);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  auto* mod = reinterpret_cast<Module*>(m);
  void* entry = dlsym(mod->lib, (std::string("kiln_host_entry_") + name).c_str());
  if (!entry) return CUDA_ERROR_NOT_FOUND;
  mod->functions.push_back(std::make_unique<Function>(Function{reinterpret_cast<KilnHostEntry>(entry), name}));
  *f = reinterpret_cast<CUfunction>(mod->functions.back().get());
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }

// The arguments are copied when the call returns, as the driver does: the caller may reuse
// them at once.
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void** params,
                        void** extra) {
  if (extra || bx * by * bz == 0 || bx * by * bz > 1024 || gx * gy * gz == 0 || shared > (227u << 10))
    return CUDA_ERROR_INVALID_VALUE;
  auto* fn = reinterpret_cast<Function*>(f);
  KilnHostLaunch launch{{gx, gy, gz}, {bx, by, bz}, shared, nullptr, nullptr, nullptr, 1, nullptr, nullptr};
  // Each argument is copied at its size, which the kernel's entry reports (params == nullptr).
  std::vector<size_t> sizes(64);
  void* query[2] = {sizes.data(), nullptr};
  fn->entry(nullptr, query);
  size_t count = reinterpret_cast<size_t>(query[1]), bytes = 0;
  for (size_t i = 0; i < count; ++i) bytes += sizes[i];
  if (bytes > 32764) return CUDA_ERROR_INVALID_VALUE;  // CUDA 12.1's limit on a launch's arguments
  static const bool host_only = env_int("KILN_HOST_CUDA_HOST_ONLY", 0) != 0;
  if (host_only) return CUDA_SUCCESS;
  auto copies = std::make_shared<std::vector<std::vector<char>>>();
  for (size_t i = 0; i < count; ++i)
    copies->emplace_back(static_cast<char*>(params[i]), static_cast<char*>(params[i]) + sizes[i]);
  host_cupti::Tag t = work_tag(host_cupti::Work::Kernel, stream_of(s));
  t.name = fn->name;
  t.grid[0] = gx, t.grid[1] = gy, t.grid[2] = gz, t.block[0] = bx, t.block[1] = by, t.block[2] = bz;
  t.shared = shared;
  stream_of(s)->push(host_cupti::tagged(std::move(t), [fn, launch, copies]() mutable {
    std::vector<void*> args;
    for (auto& c : *copies) args.push_back(c.data());
    t_worker->prepare(launch);
    fn->entry(&launch, args.data());
  }));
  return CUDA_SUCCESS;
}

// Not the driver's: a device's memory budget (set when bytes >= 0; the old one is returned) and
// what is in use, so that tests can make a device nearly full without filling it.
long long kiln_host_memory_budget(int device, long long bytes) {
  Host& h = host();
  std::lock_guard<std::mutex> lock(h.mu);
  Device& d = h.devices[static_cast<size_t>(device)];
  const long long old = static_cast<long long>(d.budget);
  if (bytes >= 0) d.budget = static_cast<size_t>(bytes);
  return old;
}
long long kiln_host_cuda_synchronizations() { return g_synchronizations.load(std::memory_order_relaxed); }
long long kiln_host_cuda_pageable_uploads() { return g_pageable_uploads.load(std::memory_order_relaxed); }
long long kiln_host_cuda_device_copies() { return g_device_copies.load(std::memory_order_relaxed); }
long long kiln_host_memory_used(int device) {
  Host& h = host();
  std::lock_guard<std::mutex> lock(h.mu);
  return static_cast<long long>(h.devices[static_cast<size_t>(device)].used);
}

}  // extern "C"
