// runtime/profiler.h -- where a run's time goes, as a Chrome trace (opens in Perfetto and
// chrome://tracing) and as a table.
//
//   kiln::profiler::start();
//   for (...) train_step(x, y);
//   kiln::profiler::stop("trace.json");            // the timeline, per thread
//   std::cout << kiln::profiler::summary();        // the table, by total time
//
// or `KILN_PROFILE=trace.json ./prog` for a whole run (written at exit), or a scoped
// `kiln::profiler::Session s("trace.json");`. The trace shows per thread: eager ops (name,
// input types), autograd backward nodes, jit calls (hit, miss or trace, with the signature),
// kernel compiles (emit, LLVM optimize, codegen, link; disk hit or miss), each kernel call of a
// compiled function (kernel, ops in its group, bytes moved), parallel-for chunks on the pool's
// threads, and the allocator's bytes (allocated, cached, peak) as counter tracks.
//
// Off, an event site costs one relaxed atomic load. Events nest per thread (a jit call holds its
// kernels; a backward node holds its ops), so summary()'s totals overlap between levels.
//
// Devices: while it records, every kernel, copy and memset a CUDA device runs is recorded with
// the device's own start and end (CUPTI's activity API, as PyTorch's profiler records through
// Kineto), on a track per stream, named after the kiln op or fused group that queued it (a
// cuBLAS or cuDNN kernel after the call that issued it), with a flow arrow from the host span
// that queued it; kernels replayed from a CUDA graph too. summary() adds a device table. Where
// CUPTI is missing or refused, the profiler says why once and records the host as before.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::profiler {

namespace detail {
extern std::atomic<bool> g_on;
}

/// Whether recording is on (one relaxed atomic load: what every event site pays when off).
inline bool enabled() { return detail::g_on.load(std::memory_order_relaxed); }

/// Starts recording; events of an earlier recording are dropped.
void start();
/// Stops recording. With a path, writes the recording there as Chrome trace JSON (throws
/// kiln::Error when it cannot). The recording stays for summary() until the next start().
void stop(const std::string& path = "");
/// The last recording (or the current one, so far) as a table sorted by total time: event,
/// kind, calls, total, mean, and share of the recording's wall time.
std::string summary(size_t max_rows = 30);

/// A kernel (or copy, or memset) of the device table, by its kiln name.
struct DeviceKernel {
  std::string name;    // "fused add+relu", "matmul: sm90_xmma_gemm_..." (a library's, after its call)
  std::string device;  // "cuda:0"
  int64_t calls = 0, total_ns = 0;
  bool kiln = false;  // a kernel kiln compiled
  /// The bytes and FLOPs of the calls whose counts are known, and those calls' device time.
  double bytes = 0, flops = 0;
  int64_t known_ns = 0;
  double bandwidth() const { return known_ns > 0 ? bytes / (static_cast<double>(known_ns) / 1e9) : 0; }  // bytes/s
  double flop_rate() const { return known_ns > 0 ? flops / (static_cast<double>(known_ns) / 1e9) : 0; }  // FLOP/s
};
/// The last recording's device work (a recording's device records arrive at its stop()).
struct DeviceSummary {
  std::vector<DeviceKernel> kernels;  // by total device time, most first
  int64_t records = 0;                // kernels, copies and memsets
  int64_t launches = 0;               // kernels alone
  int64_t total_ns = 0;               // the records' times summed
  int64_t busy_ns = 0;                // the time some device was busy (overlaps counted once)
  int64_t wall_ns = 0;                // the recording's wall time
  /// Per device, its peak memory bandwidth (bytes/s) and f32 rate (FLOP/s) from its attributes.
  std::vector<std::pair<std::string, std::pair<double, double>>> peaks;
  std::string missing;  // why the recording has no device timeline ("" when it has one)
  std::pair<double, double> peak(const std::string& device) const;
};
DeviceSummary device_summary();

/// Records while it lives, then writes `path` (and keeps the recording for summary()).
class Session {
 public:
  explicit Session(std::string path) : path_(std::move(path)) { start(); }
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  std::string path_;
};

// ---- event sites (kiln's own code; usable by programs that want their own spans) -----------

/// The kind of an event: its category in the trace and the summary's "kind" column.
enum class Kind : uint8_t { Op, Autograd, Jit, Compile, Kernel, Parallel, Memory, User };

/// A span from construction to destruction on this thread. Off, it does nothing else.
class Scope {
 public:
  Scope(Kind kind, std::string_view name) : on_(enabled()) {
    if (on_) begin(kind, name);
  }
  ~Scope() {
    if (on_) end();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  /// Whether this span records (build arguments only then).
  explicit operator bool() const { return on_; }
  /// Adds an argument shown with the event (a string or a number).
  void arg(std::string_view key, std::string_view value);
  void arg(std::string_view key, int64_t value);

 private:
  void begin(Kind kind, std::string_view name);
  void end();
  bool on_;
  int64_t start_ns_ = 0;
  size_t slot_ = 0;  // this event's place in the thread's buffer
};

/// Device work a scope queues (kernels, copies, memsets) is tied to it: on the device's tracks
/// those take `name` (when empty, the innermost span's on this thread), with a flow arrow from
/// that span, and `bytes` and `flops` (when not negative) give the device table's achieved
/// rates. The outermost one on a thread ties the work; nested ones do nothing. Off, or without
/// a device timeline, it does nothing else.
class DeviceWork {
 public:
  explicit DeviceWork(std::string_view name = {}, int64_t bytes = -1, double flops = -1) {
    if (enabled()) begin(name, bytes, flops);
  }
  ~DeviceWork() {
    if (id_) end();
  }
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;

 private:
  void begin(std::string_view name, int64_t bytes, double flops);
  void end();
  uint64_t id_ = 0;
  int* depth_ = nullptr;  // the thread's nesting count
};
/// Names a compiled kernel (`symbol`, kiln_<hash>) for the device tracks, with the bytes and
/// FLOPs of one launch: a CUDA graph's replay runs kernels no DeviceWork named.
void name_kernel(std::string_view symbol, std::string_view name, int64_t bytes, double flops);

/// A counter track sample (kind "memory"): name, then (series, value) pairs ("memory":
/// allocated, cached, peak).
void counter(std::string_view name, std::initializer_list<std::pair<const char*, int64_t>> values);
/// Names the calling thread in traces ("kiln worker 1").
void name_thread(std::string_view name);

namespace detail {
/// One piece of device work as a device runtime records it.
struct DeviceRecord {
  enum Kind : uint8_t { Kernel, Memcpy, Memset } kind = Kernel;
  std::string name;    // a kernel's symbol as the device has it; a copy's direction
  std::string device;  // "cuda:0"
  uint32_t stream = 0;
  int64_t start_ns = 0, end_ns = 0;  // on the profiler's clock (now_ns below)
  uint64_t work = 0;                 // the DeviceWork that queued it; 0: none
  int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int registers = 0;      // per thread
  int shared_bytes = 0;   // per block, static and dynamic
  int64_t bytes = 0;      // a copy's or a memset's
  bool in_graph = false;  // replayed from a CUDA graph
};
/// What a device runtime gives the profiler (CUDA's: runtime/cuda/activity_cuda.cpp).
struct DeviceTracer {
  /// Starts recording; "" when it records (or has no device to record), else why not.
  std::string (*start)();
  /// Stops and returns what was recorded since start.
  std::vector<DeviceRecord> (*stop)();
  /// Device work queued on this thread until pop() belongs to DeviceWork `id`.
  void (*push)(uint64_t id);
  void (*pop)();
  /// The device's peak memory bandwidth (bytes/s) and f32 rate (FLOP/s) from its attributes.
  std::pair<double, double> (*peaks)(const std::string& device);
};
void install_device_tracer(const DeviceTracer* tracer);
/// The profiler's clock: nanoseconds since the process started recording anything.
int64_t now_ns();
}  // namespace detail

}  // namespace kiln::profiler
