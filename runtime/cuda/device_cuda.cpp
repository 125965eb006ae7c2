// runtime/cuda/device_cuda.cpp -- devices, their primary contexts, stream pools, the thread's
// current device and streams, events; the public functions of runtime/cuda.h.
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda_internal.h"

namespace kiln::cuda {
namespace {

constexpr int kPoolSize = 32;  // streams per device, handed out round robin (PyTorch's choice)

struct DeviceState {
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::once_flag pool_once;
  std::array<CUstream, kPoolSize> pool{};
  std::atomic<uint32_t> next{0};
};

struct Devices {
  std::vector<std::unique_ptr<DeviceState>> states;
  std::mutex mu;  // guards making a context
};

Devices& devices() {
  static auto* d = [] {
    auto* ds = new Devices;  // never destroyed: streams and contexts outlive statics
    if (const Driver* drv = driver()) {
      int n = 0;
      check(drv->cuDeviceGetCount(&n), "cuDeviceGetCount");
      for (int i = 0; i < n; ++i) ds->states.push_back(std::make_unique<DeviceState>());
    }
    return ds;
  }();
  return *d;
}

thread_local int t_device = 0;
thread_local CUcontext t_context = nullptr;
thread_local std::vector<CUstream> t_streams;  // current stream per device (0: default)

DeviceState& state(int index, const char* what) {
  const Driver& drv = require_driver(what);
  Devices& ds = devices();
  KILN_CHECK(index >= 0 && index < static_cast<int>(ds.states.size()), "{}: cuda:{} does not exist ({} CUDA device{})",
             what, index, ds.states.size(), ds.states.size() == 1 ? "" : "s");
  DeviceState& s = *ds.states[static_cast<size_t>(index)];
  if (!s.context) {
    std::lock_guard<std::mutex> lock(ds.mu);
    if (!s.context) {
      check(drv.cuDeviceGet(&s.device, index), "cuDeviceGet");
      CUcontext c = nullptr;
      check(drv.cuDevicePrimaryCtxRetain(&c, s.device), "cuDevicePrimaryCtxRetain");
      s.context = c;
    }
  }
  return s;
}

}  // namespace

CUcontext bind(int index, const char* what) {
  DeviceState& s = state(index, what);
  if (t_context != s.context) {
    check(driver()->cuCtxSetCurrent(s.context), "cuCtxSetCurrent");
    t_context = s.context;
  }
  return s.context;
}

int resolve(int index) { return index < 0 ? t_device : index; }

CUstream current(int index) {
  return index < static_cast<int>(t_streams.size()) ? t_streams[static_cast<size_t>(index)] : nullptr;
}

bool is_available() { return driver() != nullptr; }

int device_count() { return driver() ? static_cast<int>(devices().states.size()) : 0; }

int current_device() { return t_device; }

void set_device(int index) {
  bind(index, "cuda::set_device");
  t_device = index;
}

Stream Stream::create(int index) {
  index = resolve(index);
  DeviceState& s = state(index, "cuda::Stream::create");
  bind(index, "cuda::Stream::create");
  std::call_once(s.pool_once, [&] {
    for (CUstream& st : s.pool)
      check(driver()->cuStreamCreateWithPriority(&st, CU_STREAM_NON_BLOCKING, 0), "cuStreamCreateWithPriority");
  });
  CUstream st = s.pool[s.next.fetch_add(1, std::memory_order_relaxed) % kPoolSize];
  return Stream(index, reinterpret_cast<uintptr_t>(st));
}

void Stream::synchronize() const {
  bind(device_, "cuda::Stream::synchronize");
  check(driver()->cuStreamSynchronize(reinterpret_cast<CUstream>(handle_)), "cuStreamSynchronize");
  read_deferred_checks(device_);
}

bool Stream::query() const {
  bind(device_, "cuda::Stream::query");
  CUresult r = driver()->cuStreamQuery(reinterpret_cast<CUstream>(handle_));
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuStreamQuery");
  return true;
}

Stream current_stream(int index) {
  index = resolve(index);
  state(index, "cuda::current_stream");
  return Stream(index, reinterpret_cast<uintptr_t>(current(index)));
}

Stream default_stream(int index) {
  index = resolve(index);
  state(index, "cuda::default_stream");
  return Stream(index, 0);
}

void set_current_stream(const Stream& s) {
  state(s.device_index(), "cuda::set_current_stream");
  auto i = static_cast<size_t>(s.device_index());
  if (t_streams.size() <= i) t_streams.resize(i + 1, nullptr);
  t_streams[i] = reinterpret_cast<CUstream>(s.handle());
}

StreamGuard::StreamGuard(const Stream& s) : previous_(current_stream(s.device_index())), previous_device_(t_device) {
  set_current_stream(s);
  set_device(s.device_index());
}

StreamGuard::~StreamGuard() {
  set_current_stream(previous_);
  t_device = previous_device_;
}

Event::Event(bool enable_timing) : timing_(enable_timing) {}

Event::~Event() {
  if (!handle_ || !driver()) return;
  try {
    bind(device_, "cuda::Event");
    driver()->cuEventDestroy(reinterpret_cast<CUevent>(handle_));
  } catch (const Error&) {  // a destructor must not throw; the event is leaked with its context
  }
}

void Event::record() { record(current_stream()); }

void Event::record(const Stream& s) {
  bind(s.device_index(), "cuda::Event::record");
  if (!handle_) {
    CUevent e = nullptr;
    check(driver()->cuEventCreate(&e, timing_ ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    handle_ = reinterpret_cast<uintptr_t>(e);
    device_ = s.device_index();
  }
  KILN_CHECK(device_ == s.device_index(), "cuda::Event::record: the event belongs to cuda:{}, the stream to cuda:{}",
             device_, s.device_index());
  check(driver()->cuEventRecord(reinterpret_cast<CUevent>(handle_), reinterpret_cast<CUstream>(s.handle())),
        "cuEventRecord");
}

void Event::block(const Stream& s) const {
  if (!handle_) return;  // never recorded: nothing to wait for
  bind(s.device_index(), "cuda::Event::block");
  check(driver()->cuStreamWaitEvent(reinterpret_cast<CUstream>(s.handle()), reinterpret_cast<CUevent>(handle_), 0),
        "cuStreamWaitEvent");
}

void Event::synchronize() const {
  if (!handle_) return;
  bind(device_, "cuda::Event::synchronize");
  check(driver()->cuEventSynchronize(reinterpret_cast<CUevent>(handle_)), "cuEventSynchronize");
}

bool Event::query() const {
  if (!handle_) return true;
  bind(device_, "cuda::Event::query");
  CUresult r = driver()->cuEventQuery(reinterpret_cast<CUevent>(handle_));
  if (r == CUDA_ERROR_NOT_READY) return false;
  check(r, "cuEventQuery");
  return true;
}

double Event::elapsed_ms(const Event& end) const {
  KILN_CHECK(timing_ && end.timing_, "cuda::Event::elapsed_ms: both events need timing (Event(true))");
  KILN_CHECK(handle_ && end.handle_, "cuda::Event::elapsed_ms: both events must be recorded first");
  bind(device_, "cuda::Event::elapsed_ms");
  float ms = 0;
  check(driver()->cuEventElapsedTime(&ms, reinterpret_cast<CUevent>(handle_), reinterpret_cast<CUevent>(end.handle_)),
        "cuEventElapsedTime");
  return ms;
}

namespace {
std::atomic<bool> g_allow_tf32{false};
}

bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }

void synchronize(int index) {
  index = resolve(index);
  bind(index, "cuda::synchronize");
  check(driver()->cuCtxSynchronize(), "cuCtxSynchronize");
  read_deferred_checks(index);
}

}  // namespace kiln::cuda
