// tests/cuda/host/cupti_cuda.cpp -- the subset of CUPTI's activity API kiln uses
// (runtime/cuda/activity_cuda.cpp), for the host CUDA: kernels, copies and memsets recorded as
// CUPTI's own record structs (CUpti_ActivityKernel10, Memcpy6, Memset4, ExternalCorrelation),
// handed to the client's buffers on a flush, so kiln's reading of them is what a GPU exercises.
// Timestamps are the host's steady clock in nanoseconds, when the stream's worker ran the task.
// KILN_HOST_CUPTI_REFUSE=1 refuses to enable any activity, as a driver without profiling
// permission does (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES).
#include <cupti.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/cuda/host/activity_cuda.h"

namespace host_cupti {
namespace {

struct Log {
  std::mutex mu;
  std::atomic<bool> kernels{false}, memcpy{false}, memset{false}, external{false};
  std::atomic<uint32_t> next_correlation{1};
  CUpti_BuffersCallbackRequestFunc requested = nullptr;
  CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  std::vector<std::vector<char>> records;  // each a whole CUPTI record, in the order made
  std::set<std::string> names;             // the kernels' names the records point at
};
Log& activity_log() {
  static Log* l = new Log;  // never destroyed: workers may record at exit
  return *l;
}

thread_local std::vector<uint64_t> t_external;  // this thread's CUSTOM0 external ids
thread_local uint32_t t_replay_graph = 0, t_replay_correlation = 0;

uint64_t now() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

template <class R> void append(const R& r) {
  std::vector<char> bytes(sizeof(R));
  std::memcpy(bytes.data(), &r, sizeof(R));
  std::lock_guard<std::mutex> lock(activity_log().mu);
  activity_log().records.push_back(std::move(bytes));
}

size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    default: return 0;
  }
}

void record(const Tag& tag, uint64_t start, uint64_t end) {
  Log& l = activity_log();
  const uint32_t correlation = t_replay_graph ? t_replay_correlation : tag.correlation;
  // What kernel, copy and memset records share (fields of the same names in each struct).
  auto stamp = [&](auto& r) {
    r.start = start, r.end = end;
    r.deviceId = static_cast<uint32_t>(tag.device);
    r.streamId = tag.stream;
    r.correlationId = correlation;
    r.graphId = t_replay_graph;
  };
  switch (tag.kind) {
    case Work::Kernel: {
      if (!l.kernels) return;
      CUpti_ActivityKernel10 k{};
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      stamp(k);
      k.completed = end;
      k.gridX = static_cast<int32_t>(tag.grid[0]), k.gridY = static_cast<int32_t>(tag.grid[1]);
      k.gridZ = static_cast<int32_t>(tag.grid[2]);
      k.blockX = static_cast<int32_t>(tag.block[0]), k.blockY = static_cast<int32_t>(tag.block[1]);
      k.blockZ = static_cast<int32_t>(tag.block[2]);
      k.dynamicSharedMemory = static_cast<int32_t>(tag.shared);
      {
        std::lock_guard<std::mutex> lock(l.mu);
        k.name = l.names.insert(tag.name).first->c_str();
      }
      append(k);
      return;
    }
    case Work::Memcpy: {
      if (!l.memcpy) return;
      CUpti_ActivityMemcpy6 m{};
      m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      m.copyKind = tag.copy_kind;
      m.bytes = tag.bytes;
      stamp(m);
      append(m);
      return;
    }
    case Work::Memset: {
      if (!l.memset) return;
      CUpti_ActivityMemset4 m{};
      m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
      m.bytes = tag.bytes;
      stamp(m);
      append(m);
      return;
    }
  }
}

bool recording() {
  Log& l = activity_log();
  return l.kernels || l.memcpy || l.memset;
}

std::atomic<bool>* flag_of(CUpti_ActivityKind kind) {
  Log& l = activity_log();
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return &l.kernels;
    case CUPTI_ACTIVITY_KIND_MEMCPY: return &l.memcpy;
    case CUPTI_ACTIVITY_KIND_MEMSET: return &l.memset;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return &l.external;
    default: return nullptr;
  }
}

}  // namespace

uint32_t begin_call() {
  if (!recording()) return 0;
  Log& l = activity_log();
  uint32_t c = l.next_correlation.fetch_add(1);
  if (l.external && !t_external.empty()) {
    CUpti_ActivityExternalCorrelation e{};
    e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    e.externalId = t_external.back();
    e.correlationId = c;
    append(e);
  }
  return c;
}

std::function<void()> tagged(Tag tag, std::function<void()> task) {
  return [tag = std::move(tag), task = std::move(task)] {
    if (!recording()) return task();
    uint64_t start = now();
    task();
    record(tag, start, now());
  };
}

void run_replayed(uint32_t graph, uint32_t correlation, const std::function<void()>& task) {
  t_replay_graph = graph, t_replay_correlation = correlation;
  task();
  t_replay_graph = 0, t_replay_correlation = 0;
}

}  // namespace host_cupti

using namespace host_cupti;

extern "C" {

CUptiResult cuptiGetVersion(uint32_t* version) {
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult r, const char** s) {
  *s = r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ? "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (host CUPTI)"
       : r == CUPTI_SUCCESS                     ? "CUPTI_SUCCESS"
                                                : "a host CUPTI error";
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t* t) {
  *t = now();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed) {
  if (!requested || !completed) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard<std::mutex> lock(activity_log().mu);
  activity_log().requested = requested;
  activity_log().completed = completed;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  const char* refuse = std::getenv("KILN_HOST_CUPTI_REFUSE");
  if (refuse && std::string(refuse) == "1") return CUPTI_ERROR_INSUFFICIENT_PRIVILEGES;
  std::atomic<bool>* f = flag_of(kind);
  if (!f) return CUPTI_ERROR_NOT_COMPATIBLE;
  if (!activity_log().requested) return CUPTI_ERROR_INVALID_OPERATION;  // no buffers to record into
  f->store(true);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  std::atomic<bool>* f = flag_of(kind);
  if (!f) return CUPTI_ERROR_NOT_COMPATIBLE;
  f->store(false);
  return CUPTI_SUCCESS;
}

// Every record made so far goes to the client, in buffers it hands over, each completed.
CUptiResult cuptiActivityFlushAll(uint32_t) {
  Log& l = activity_log();
  std::vector<std::vector<char>> records;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    records.swap(l.records);
  }
  size_t i = 0;
  while (i < records.size()) {
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    l.requested(&buffer, &size, &max_records);
    if (!buffer) return CUPTI_ERROR_OUT_OF_MEMORY;
    size_t used = 0, n = 0;
    for (; i < records.size() && used + records[i].size() <= size && (max_records == 0 || n < max_records); ++i, ++n) {
      std::memcpy(buffer + used, records[i].data(), records[i].size());
      used += records[i].size();
    }
    if (n == 0) return CUPTI_ERROR_INVALID_PARAMETER;  // a buffer too small for one record
    l.completed(nullptr, 0, buffer, size, used);
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  size_t at = 0;
  if (*record) {
    at = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer) + record_size((*record)->kind);
  }
  if (at >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + at);
  if (record_size(next->kind) == 0 || at + record_size(next->kind) > valid) return CUPTI_ERROR_INVALID_KIND;
  *record = next;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return CUPTI_ERROR_NOT_SUPPORTED;
  t_external.push_back(id);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* last) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return CUPTI_ERROR_NOT_SUPPORTED;
  if (t_external.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (last) *last = t_external.back();
  t_external.pop_back();
  return CUPTI_SUCCESS;
}

}  // extern "C"
