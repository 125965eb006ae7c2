// runtime/cuda/activity_cuda.cpp -- the profiler's CUDA timelines (runtime/profiler.h's device
// tracer): CUPTI's activity API, loaded with dlopen (KILN_CUDA_CUPTI, else CUDA 13's libcupti),
// records every kernel, copy and memset with the device's own start and end, its stream, grid,
// block, registers and shared memory, kernels replayed from CUDA graphs included. Each carries
// CUPTI's correlation id of the call that queued it; profiler::DeviceWork pushes an external
// correlation id around the calls it covers, so each record joins the kiln span that queued it
// (as Kineto joins PyTorch's ops). Where CUPTI is missing, of another major version than the
// headers kiln was built with (its records' layouts differ), or refused (a driver without
// profiling permission), start() says why and the profiler records the host only.
#include <cupti.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda/library_cuda.h"
#include "runtime/cuda_internal.h"
#include "runtime/profiler.h"

namespace kiln::cuda {
namespace {

using profiler::detail::DeviceRecord;

// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_CUPTI_FUNCTIONS(X)             \
  X(cuptiGetVersion)                        \
  X(cuptiGetResultString)                   \
  X(cuptiGetTimestamp)                      \
  X(cuptiActivityRegisterCallbacks)         \
  X(cuptiActivityEnable)                    \
  X(cuptiActivityDisable)                   \
  X(cuptiActivityFlushAll)                  \
  X(cuptiActivityGetNextRecord)             \
  X(cuptiActivityPushExternalCorrelationId) \
  X(cuptiActivityPopExternalCorrelationId)
// clang-format on

struct Cupti {
#define KILN_CUPTI_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_CUPTI_FUNCTIONS(KILN_CUPTI_DECLARE)
#undef KILN_CUPTI_DECLARE
  std::string reason;  // why it cannot record ("" when it can)
};

const Cupti& cupti() {
  static const Cupti c = [] {
    Cupti c;
    void* lib = open_library(
        "KILN_CUDA_CUPTI",
        {"libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so.13", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"},
        "CUPTI (libcupti)", &c.reason);
    if (!lib) return c;
#define KILN_CUPTI_LOAD(fn)                                                                  \
  c.fn = reinterpret_cast<decltype(&::fn)>(dlsym(lib, #fn));                                 \
  if (!c.fn) {                                                                               \
    c.reason = fmt::format("CUPTI (libcupti) has no {}: too old for kiln (CUDA 13's)", #fn); \
    return c;                                                                                \
  }
    KILN_CUPTI_FUNCTIONS(KILN_CUPTI_LOAD)
#undef KILN_CUPTI_LOAD
    uint32_t version = 0;
    if (c.cuptiGetVersion(&version) != CUPTI_SUCCESS || version / 10000 != CUPTI_API_VERSION / 10000)
      c.reason =
          fmt::format("CUPTI's version is {}, and kiln reads the records of version {}", version, CUPTI_API_VERSION);
    return c;
  }();
  return c;
}

std::string cupti_result(CUptiResult r) {
  const char* s = nullptr;
  if (cupti().cuptiGetResultString) cupti().cuptiGetResultString(r, &s);
  return s ? s : fmt::format("CUPTI error {}", static_cast<int>(r));
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

struct State {
  std::mutex mu;
  std::atomic<bool> on{false};  // recording (and push and pop go to CUPTI)
  bool registered = false;      // the buffer callbacks
  int64_t offset = 0;           // CUPTI's clock minus the profiler's
  std::vector<DeviceRecord> records;
  std::vector<uint32_t> correlation;                // per record: CUPTI's correlation id
  std::unordered_map<uint32_t, uint64_t> external;  // correlation id -> DeviceWork id
};
State& activity_state() {
  static State* s = new State;  // never destroyed: CUPTI may hand buffers back at exit
  return *s;
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

std::string cupti_device(uint32_t id) { return fmt::format("cuda:{}", id); }

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  State& s = activity_state();
  std::lock_guard<std::mutex> lock(s.mu);
  CUpti_Activity* rec = nullptr;
  while (cupti().cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    DeviceRecord d;
    uint32_t correlation = 0;
    // What kernel, copy and memset records share (fields of the same names in each struct).
    auto common = [&](const auto* r) {
      d.device = cupti_device(r->deviceId);
      d.stream = r->streamId;
      d.start_ns = static_cast<int64_t>(r->start) - s.offset;
      d.end_ns = static_cast<int64_t>(r->end) - s.offset;
      d.in_graph = r->graphId != 0;
      correlation = r->correlationId;
    };
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        d.kind = DeviceRecord::Kernel;
        d.name = k->name ? k->name : "kernel";
        common(k);
        d.grid[0] = k->gridX, d.grid[1] = k->gridY, d.grid[2] = k->gridZ;
        d.block[0] = k->blockX, d.block[1] = k->blockY, d.block[2] = k->blockZ;
        d.registers = k->registersPerThread;
        d.shared_bytes = k->staticSharedMemory + k->dynamicSharedMemory;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        d.kind = DeviceRecord::Memcpy;
        d.name = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "memcpy HtoD"
                 : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "memcpy DtoH"
                 : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "memcpy DtoD"
                                                                  : "memcpy";
        common(m);
        d.bytes = static_cast<int64_t>(m->bytes);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        d.kind = DeviceRecord::Memset;
        d.name = "memset";
        common(m);
        d.bytes = static_cast<int64_t>(m->bytes);
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) s.external[e->correlationId] = e->externalId;
        continue;
      }
      default: continue;
    }
    s.records.push_back(std::move(d));
    s.correlation.push_back(correlation);
  }
  std::free(buffer);
}

std::string activity_start() {
  if (!is_available()) return "";  // no device: nothing to record, nothing to say
  const Cupti& c = cupti();
  if (!c.reason.empty()) return c.reason;
  State& s = activity_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.records.clear();
  s.correlation.clear();
  s.external.clear();
  if (!s.registered) {
    if (CUptiResult r = c.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS)
      return "CUPTI refused its activity buffers: " + cupti_result(r);
    s.registered = true;
  }
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    if (CUptiResult r = c.cuptiActivityEnable(kKinds[i]); r != CUPTI_SUCCESS) {
      for (size_t j = 0; j < i; ++j) c.cuptiActivityDisable(kKinds[j]);
      return "CUPTI refused to record the devices' activity: " + cupti_result(r);
    }
  }
  uint64_t t = 0;
  c.cuptiGetTimestamp(&t);
  s.offset = static_cast<int64_t>(t) - profiler::detail::now_ns();
  s.on = true;
  return "";
}

std::vector<DeviceRecord> activity_stop() {
  State& s = activity_state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.on) return {};
    s.on = false;
  }
  const Cupti& c = cupti();
  c.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // hands every buffer back
  for (CUpti_ActivityKind k : kKinds) c.cuptiActivityDisable(k);
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<DeviceRecord> out = std::move(s.records);
  for (size_t i = 0; i < out.size(); ++i)
    if (auto it = s.external.find(s.correlation[i]); it != s.external.end()) out[i].work = it->second;
  s.records.clear();
  s.correlation.clear();
  s.external.clear();
  return out;
}

void activity_push(uint64_t id) {
  if (activity_state().on) cupti().cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
}
void activity_pop() {
  uint64_t last = 0;
  if (activity_state().on)
    cupti().cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

// The FP32 lanes of a multiprocessor, by architecture (the data sheets'): sm_80 64, sm_86 to
// sm_90 and later 128.
int fp32_lanes(int cc) { return cc == 80 ? 64 : cc < 80 ? 64 : 128; }

std::pair<double, double> device_peaks(const std::string& device) {
  int index = 0;
  if (device.rfind("cuda:", 0) != 0 || (index = std::atoi(device.c_str() + 5), index >= device_count())) return {0, 0};
  try {
    double memory_hz = 1e3 * attribute(index, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "profiler");
    double bus_bytes = attribute(index, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "profiler") / 8.0;
    double clock_hz = 1e3 * attribute(index, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "profiler");
    double sms = attribute(index, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "profiler");
    return {2 * memory_hz * bus_bytes, sms * fp32_lanes(compute_capability(index)) * 2 * clock_hz};
  } catch (const Error&) {
    return {0, 0};
  }
}

const profiler::detail::DeviceTracer kTracer{activity_start, activity_stop, activity_push, activity_pop, device_peaks};
const bool g_tracer_installed = (profiler::detail::install_device_tracer(&kTracer), true);

}  // namespace
}  // namespace kiln::cuda
