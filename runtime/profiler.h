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
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

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

/// A counter track sample (kind "memory"): name, then (series, value) pairs ("memory":
/// allocated, cached, peak).
void counter(std::string_view name, std::initializer_list<std::pair<const char*, int64_t>> values);
/// Names the calling thread in traces ("kiln worker 1").
void name_thread(std::string_view name);

}  // namespace kiln::profiler
