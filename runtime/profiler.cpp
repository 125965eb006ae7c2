// runtime/profiler.cpp -- see profiler.h. Each thread appends to a buffer of its own (its lock is
// only ever contended by stop()); stop() gathers the buffers and writes Chrome's trace format:
// complete events ("ph":"X", microseconds), counter events ("ph":"C") and thread names ("M").
#include "runtime/profiler.h"

#include <fmt/format.h>

#include <cxxabi.h>
#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "runtime/error.h"
#include "runtime/files.h"

namespace kiln::profiler {
namespace detail {
std::atomic<bool> g_on{false};
}
namespace {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Op: return "op";
    case Kind::Autograd: return "autograd";
    case Kind::Jit: return "jit";
    case Kind::Compile: return "compile";
    case Kind::Kernel: return "kernel";
    case Kind::Parallel: return "parallel";
    case Kind::Memory: return "memory";
    case Kind::User: return "user";
  }
  return "?";
}

struct Event {
  char ph;  // 'X' a span, 'C' a counter sample, 'w' device work (DeviceWork; not written itself)
  Kind kind;
  std::string name;
  std::string args;  // the inside of a JSON object: "k":v,...
  int64_t ts_ns;
  int64_t dur_ns;
  uint64_t work = 0;  // 'w': its id
  int64_t bytes = -1;
  double flops = -1;
};

// A compiled kernel's name and one launch's bytes and FLOPs (name_kernel).
struct KernelName {
  std::string name;
  int64_t bytes = -1;
  double flops = -1;
};

struct ThreadBuffer {
  std::mutex mu;
  int tid = 0;
  std::string name;
  uint64_t generation = 0;  // the recording its events belong to
  std::vector<Event> events;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // kept after their threads end
  std::atomic<uint64_t> generation{0};
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
  int64_t start_ns = 0, stop_ns = -1;       // of the last recording (-1: still running)
  std::vector<std::pair<int, Event>> last;  // the stopped recording: (tid, event)
  // Devices: the tracer a device runtime installed, whether it records now, why it did not,
  // what it recorded last, and the kernels' names.
  std::atomic<const detail::DeviceTracer*> tracer{nullptr};
  // The device tracer of the recording: started at its first DeviceWork (devices run nothing
  // before one), so a recording started while the library loads (KILN_PROFILE) finds it.
  enum Devices : int { kNone, kPending, kTracing };
  std::atomic<int> devices{kNone};
  std::mutex devices_mu;
  std::string no_devices;  // why the last recording has no device timeline ("" when it has)
  bool said = false;       // no_devices printed once
  std::vector<detail::DeviceRecord> device_last;
  std::atomic<uint64_t> next_work{0};
  std::mutex names_mu;
  std::map<std::string, KernelName, std::less<>> kernel_names;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: KILN_PROFILE writes at exit
  return *r;
}

int64_t clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - registry().epoch)
      .count();
}

ThreadBuffer& buffer() {
  thread_local std::shared_ptr<ThreadBuffer> mine = [] {
    auto b = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    b->tid = static_cast<int>(r.buffers.size()) + 1;
    b->name = b->tid == 1 ? "main" : fmt::format("thread {}", b->tid);
    r.buffers.push_back(b);
    return b;
  }();
  return *mine;
}

// The buffer, emptied first if it still holds an earlier recording's events.
ThreadBuffer& current(std::unique_lock<std::mutex>& lock) {
  ThreadBuffer& b = buffer();
  lock = std::unique_lock<std::mutex>(b.mu);
  uint64_t g = registry().generation.load(std::memory_order_relaxed);
  if (b.generation != g) {
    b.events.clear();
    b.generation = g;
  }
  return b;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else out += c;
    }
  }
  out += '"';
}

// Every event of the current recording, each with its thread's id; stops nothing.
std::vector<std::pair<int, Event>> gather() {
  Registry& r = registry();
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    buffers = r.buffers;
  }
  uint64_t g = r.generation.load();
  std::vector<std::pair<int, Event>> all;
  for (const auto& b : buffers) {
    std::lock_guard<std::mutex> lock(b->mu);
    if (b->generation != g) continue;
    for (const Event& e : b->events)
      if (e.ph != 'X' || e.dur_ns >= 0) all.emplace_back(b->tid, e);  // spans still open are left out
  }
  return all;
}

// ---- devices -----------------------------------------------------------------------------------

// The device work of a recording by id: (tid, its event).
std::map<uint64_t, std::pair<int, const Event*>> works_of(const std::vector<std::pair<int, Event>>& events) {
  std::map<uint64_t, std::pair<int, const Event*>> works;
  for (const auto& [tid, e] : events)
    if (e.ph == 'w') works[e.work] = {tid, &e};
  return works;
}

// A kernel's name as a C++ compiler wrote it, without its arguments: cuBLAS's and cuDNN's.
std::string demangled(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), std::free);
  std::string n = status == 0 && d ? std::string(d.get()) : symbol;
  if (size_t paren = n.find('('); paren != std::string::npos && paren > 0) n.resize(paren);
  return n;
}

// What a device record is shown as: a kiln kernel by the op or group that queued it (or, replayed
// from a graph, by name_kernel's name), a library's kernel after the kiln call that issued it.
struct Shown {
  std::string name;
  int64_t bytes = -1;
  double flops = -1;
  bool kiln = false;
  uint64_t counted_by = 0;  // the work whose counts these are (its kernels share them), or 0
};
Shown shown(const detail::DeviceRecord& d, const std::map<uint64_t, std::pair<int, const Event*>>& works) {
  const Event* w = nullptr;
  if (auto it = works.find(d.work); d.work && it != works.end()) w = it->second.second;
  Shown s;
  if (d.kind == detail::DeviceRecord::Memcpy) s.name = d.name;
  else if (d.kind == detail::DeviceRecord::Memset) s.name = "memset";
  if (!s.name.empty()) {
    if (w) s.name = w->name + ": " + s.name;
    s.bytes = d.bytes;
    return s;
  }
  s.kiln = d.name.rfind("kiln_", 0) == 0;
  if (s.kiln) {
    // Launched by a kiln call that counted its bytes (an eager op, a plan's group): its name and
    // counts. Else (a CUDA graph's replay, a launch no call named) by the name its compile gave
    // it, as name_kernel says.
    if (w && w->bytes >= 0 && !d.in_graph) return {w->name, w->bytes, w->flops, true, d.work};
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.names_mu);
    if (auto it = r.kernel_names.find(d.name); it != r.kernel_names.end()) {
      s = {it->second.name, it->second.bytes, it->second.flops, true};
    } else {
      s.name = w ? w->name : d.name;
    }
    return s;
  }
  s.name = (w ? w->name + ": " : std::string()) + demangled(d.name);
  return s;
}

std::string device_json(const std::vector<std::pair<int, Event>>& events,
                        const std::vector<detail::DeviceRecord>& devices) {
  if (devices.empty()) return {};
  std::map<uint64_t, std::pair<int, const Event*>> works = works_of(events);
  std::map<std::string, int> pids;  // a process per device, a thread per stream
  std::map<std::pair<int, uint32_t>, bool> streams;
  std::string out;
  for (const detail::DeviceRecord& d : devices) {
    auto [it, fresh] = pids.emplace(d.device, 2 + static_cast<int>(pids.size()));
    if (fresh) {
      out += fmt::format(",\n{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":",
                         it->second);
      append_json_string(out, d.device);
      out += "}}";
    }
    if (streams.emplace(std::pair{it->second, d.stream}, true).second)
      out += fmt::format(
          ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"stream {}\"}}}}",
          it->second, d.stream, d.stream);
  }
  uint64_t flows = 0;
  for (const detail::DeviceRecord& d : devices) {
    int pid = pids.at(d.device);
    Shown sh = shown(d, works);
    const char* cat = d.kind == detail::DeviceRecord::Kernel   ? "kernel"
                      : d.kind == detail::DeviceRecord::Memcpy ? "memcpy"
                                                               : "memset";
    out += fmt::format(",\n{{\"ph\":\"X\",\"cat\":\"device {}\",\"name\":", cat);
    append_json_string(out, sh.name);
    out += fmt::format(",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},\"args\":{{", pid, d.stream,
                       static_cast<double>(d.start_ns) / 1e3, static_cast<double>(d.end_ns - d.start_ns) / 1e3);
    if (d.kind == detail::DeviceRecord::Kernel) {
      out += "\"kernel\":";
      append_json_string(out, d.name);
      out +=
          fmt::format(",\"grid\":[{},{},{}],\"block\":[{},{},{}],\"registers per thread\":{},\"shared bytes\":{}",
                      d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1], d.block[2], d.registers, d.shared_bytes);
      if (sh.bytes >= 0) out += fmt::format(",\"bytes\":{}", sh.bytes);
      if (sh.flops >= 0) out += fmt::format(",\"flops\":{:.0f}", sh.flops);
    } else {
      out += fmt::format("\"bytes\":{}", d.bytes);
    }
    out += fmt::format(",\"stream\":{}{}}}}}", d.stream, d.in_graph ? ",\"cuda graph\":true" : "");
    // A flow arrow from the span that queued it (its DeviceWork) to its start on the device: one
    // per record (a work's kernels, a graph's replayed ones, each get their own).
    auto w = works.find(d.work);
    if (!d.work || w == works.end()) continue;
    ++flows;
    out += fmt::format(
        ",\n{{\"ph\":\"s\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":{},\"pid\":1,\"tid\":{},\"ts\":{:.3f}}}",
        flows, w->second.first, static_cast<double>(w->second.second->ts_ns) / 1e3);
    out += fmt::format(
        ",\n{{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":{},\"pid\":{},\"tid\":{},\"ts\":{"
        ":.3f}}}",
        flows, pid, d.stream, static_cast<double>(d.start_ns) / 1e3);
  }
  return out;
}

std::string trace_json(const std::vector<std::pair<int, Event>>& events,
                       const std::vector<detail::DeviceRecord>& devices) {
  Registry& r = registry();
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"kiln\"}}";
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& b : r.buffers) {
      std::lock_guard<std::mutex> block(b->mu);
      out +=
          fmt::format(",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":", b->tid);
      append_json_string(out, b->name);
      out += "}}";
    }
  }
  for (const auto& [tid, e] : events) {
    if (e.ph == 'w') continue;  // device work: its flows below
    out += fmt::format(",\n{{\"ph\":\"{}\",\"cat\":\"{}\",\"name\":", e.ph, kind_name(e.kind));
    append_json_string(out, e.name);
    out += fmt::format(",\"pid\":1,\"tid\":{},\"ts\":{:.3f}", tid, static_cast<double>(e.ts_ns) / 1e3);
    if (e.ph == 'X') out += fmt::format(",\"dur\":{:.3f}", static_cast<double>(e.dur_ns) / 1e3);
    out += ",\"args\":{" + e.args + "}}";
  }
  out += device_json(events, devices);
  out += "\n]}\n";
  return out;
}

// KILN_PROFILE=path: the whole run, written at exit with the summary on stderr.
struct WholeRun {
  WholeRun() {
    const char* p = std::getenv("KILN_PROFILE");
    if (!p || !*p) return;
    path() = p;
    start();
    std::atexit([] {
      try {
        stop(path());
        std::fprintf(stderr, "[kiln] profile written to %s\n%s", path().c_str(), summary().c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[kiln] KILN_PROFILE: %s\n", e.what());
      }
    });
  }
  static std::string& path() {
    static std::string* p = new std::string();
    return *p;
  }
};
WholeRun whole_run;

// The span's event in the calling thread's buffer; null when a recording that started since
// cleared the buffer (the span is not part of it).
Event* event_of(ThreadBuffer& b, size_t slot, int64_t start_ns) {
  return slot < b.events.size() && b.events[slot].ts_ns == start_ns ? &b.events[slot] : nullptr;
}

void append_arg(size_t slot, int64_t start_ns, std::string_view key, std::string_view json_value) {
  std::unique_lock<std::mutex> lock;
  Event* e = event_of(current(lock), slot, start_ns);
  if (!e) return;
  if (!e->args.empty()) e->args += ',';
  append_json_string(e->args, key);
  e->args += ':';
  e->args += json_value;
}

}  // namespace

void Scope::begin(Kind kind, std::string_view name) {
  std::unique_lock<std::mutex> lock;
  ThreadBuffer& b = current(lock);
  start_ns_ = clock_ns();
  slot_ = b.events.size();
  b.events.push_back(Event{'X', kind, std::string(name), {}, start_ns_, -1});
}

void Scope::end() {
  int64_t t = clock_ns();
  std::unique_lock<std::mutex> lock;
  if (Event* e = event_of(current(lock), slot_, start_ns_)) e->dur_ns = t - start_ns_;
}

void Scope::arg(std::string_view key, std::string_view value) {
  if (!on_) return;
  std::string json;
  append_json_string(json, value);
  append_arg(slot_, start_ns_, key, json);
}

void Scope::arg(std::string_view key, int64_t value) {
  if (on_) append_arg(slot_, start_ns_, key, std::to_string(value));
}

void counter(std::string_view name, std::initializer_list<std::pair<const char*, int64_t>> values) {
  if (!enabled()) return;
  std::string args;
  for (const auto& [k, v] : values) {
    if (!args.empty()) args += ',';
    append_json_string(args, k);
    args += fmt::format(":{}", v);
  }
  std::unique_lock<std::mutex> lock;
  ThreadBuffer& b = current(lock);
  b.events.push_back(Event{'C', Kind::Memory, std::string(name), std::move(args), clock_ns(), 0});
}

void name_thread(std::string_view name) {
  ThreadBuffer& b = buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  b.name = name;
}

void start() {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.generation.fetch_add(1);  // each buffer empties itself on its next event
    r.last.clear();
    r.device_last.clear();
    r.start_ns = clock_ns();
    r.stop_ns = -1;
  }
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.no_devices.clear();
  }
  r.devices.store(Registry::kPending);  // (started by the first DeviceWork)
  detail::g_on.store(true, std::memory_order_relaxed);
}

void stop(const std::string& path) {
  bool was_on = detail::g_on.exchange(false);
  Registry& r = registry();
  if (was_on) {
    std::vector<detail::DeviceRecord> devices;
    {
      std::lock_guard<std::mutex> lock(r.devices_mu);
      if (r.devices.exchange(Registry::kNone) == Registry::kTracing)
        devices = r.tracer.load()->stop();  // flushes the devices' buffers
    }
    std::vector<std::pair<int, Event>> events = gather();
    std::lock_guard<std::mutex> lock(r.mu);
    r.last = std::move(events);
    r.device_last = std::move(devices);
    r.stop_ns = clock_ns();
  }
  if (path.empty()) return;
  std::vector<std::pair<int, Event>> events;
  std::vector<detail::DeviceRecord> devices;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    events = r.last;
    devices = r.device_last;
  }
  files::write_atomic(path, trace_json(events, devices), "profiler");
}

namespace {
// Starts the device tracer of the recording, at its first device work (said once when it cannot).
void start_devices(Registry& r) {
  std::lock_guard<std::mutex> lock(r.devices_mu);
  if (r.devices.load() != Registry::kPending) return;
  const detail::DeviceTracer* t = r.tracer.load();
  std::string why = t ? t->start() : "";
  r.devices.store(t && why.empty() ? Registry::kTracing : Registry::kNone);
  if (why.empty()) return;
  std::lock_guard<std::mutex> mu(r.mu);
  r.no_devices = why;
  if (r.said) return;
  r.said = true;
  std::fprintf(stderr, "[kiln] profiler: no device timelines: %s (recording the host only)\n", why.c_str());
}
}  // namespace

void DeviceWork::begin(std::string_view name, int64_t bytes, double flops) {
  thread_local int depth = 0;  // (the outermost on a thread ties the work)
  Registry& r = registry();
  if (depth > 0) return;
  if (r.devices.load() == Registry::kPending) start_devices(r);
  if (r.devices.load() != Registry::kTracing) return;
  ++depth;
  id_ = r.next_work.fetch_add(1) + 1;
  {
    std::unique_lock<std::mutex> lock;
    ThreadBuffer& b = current(lock);
    std::string label(name);
    for (size_t i = b.events.size(); label.empty() && i-- > 0;)  // the innermost open span
      if (b.events[i].ph == 'X' && b.events[i].dur_ns < 0) label = b.events[i].name;
    Event e{'w', Kind::Kernel, label.empty() ? "device work" : label, {}, clock_ns(), 0};
    e.work = id_;
    e.bytes = bytes;
    e.flops = flops;
    b.events.push_back(std::move(e));
  }
  r.tracer.load()->push(id_);
  depth_ = &depth;
}

void DeviceWork::end() {
  registry().tracer.load()->pop();
  --*depth_;
}

void name_kernel(std::string_view symbol, std::string_view name, int64_t bytes, double flops) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.names_mu);
  r.kernel_names[std::string(symbol)] = {std::string(name), bytes, flops};
}

namespace detail {
void install_device_tracer(const DeviceTracer* tracer) { registry().tracer.store(tracer); }
int64_t now_ns() { return clock_ns(); }
}  // namespace detail

namespace {
// The device time by kernel (its kiln name), with the achieved rates where the bytes and FLOPs of
// its launches are known, against the device's peaks (from its attributes).
DeviceSummary summarize_devices(const std::vector<std::pair<int, Event>>& events,
                                const std::vector<detail::DeviceRecord>& devices) {
  DeviceSummary sum;
  std::map<uint64_t, std::pair<int, const Event*>> works = works_of(events);
  std::map<std::string, DeviceKernel> rows;
  std::set<uint64_t> counted;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const detail::DeviceRecord& d : devices) {
    Shown sh = shown(d, works);
    DeviceKernel& row = rows[sh.name];
    int64_t ns = d.end_ns - d.start_ns;
    row.name = sh.name;
    row.kiln = sh.kiln;
    ++row.calls;
    row.total_ns += ns;
    row.device = d.device;
    sum.total_ns += ns;
    ++sum.records;
    sum.launches += d.kind == detail::DeviceRecord::Kernel;
    spans.emplace_back(d.start_ns, d.end_ns);
    if (sh.bytes >= 0) {  // a work's counts once, however many kernels it ran
      if (!sh.counted_by || counted.insert(sh.counted_by).second) {
        row.bytes += static_cast<double>(sh.bytes);
        row.flops += std::max(sh.flops, 0.0);
      }
      row.known_ns += ns;
    }
  }
  std::sort(spans.begin(), spans.end());
  int64_t end = std::numeric_limits<int64_t>::min();
  for (auto [a, b] : spans) {
    if (b <= end) continue;
    sum.busy_ns += b - std::max(a, end);
    end = b;
  }
  for (auto& [name, row] : rows) sum.kernels.push_back(std::move(row));
  std::stable_sort(sum.kernels.begin(), sum.kernels.end(),
                   [](const DeviceKernel& a, const DeviceKernel& b) { return a.total_ns > b.total_ns; });
  const detail::DeviceTracer* t = registry().tracer.load();
  for (const DeviceKernel& k : sum.kernels)
    if (t && t->peaks && std::none_of(sum.peaks.begin(), sum.peaks.end(), [&](auto& p) { return p.first == k.device; }))
      sum.peaks.emplace_back(k.device, t->peaks(k.device));
  return sum;
}

std::string device_table(const DeviceSummary& sum, size_t max_rows) {
  if (sum.records == 0) return {};
  std::string out = fmt::format("device: {} kernels, copies and memsets over {:.3f} ms of device time\n", sum.records,
                                static_cast<double>(sum.total_ns) / 1e6);
  out += fmt::format("{:<44} {:>8} {:>11} {:>10} {:>7} {:>10} {:>9} {:>8} {:>7}\n", "kernel", "calls", "total ms",
                     "mean us", "share", "GB/s", "TFLOP/s", "%peak BW", "%FP32");
  size_t shown_rows = 0;
  for (const DeviceKernel& row : sum.kernels) {
    if (shown_rows++ == max_rows) {
      out += fmt::format("... and {} more\n", sum.kernels.size() - max_rows);
      break;
    }
    std::string n = row.name.size() > 44 ? row.name.substr(0, 41) + "..." : row.name;
    out += fmt::format(
        "{:<44} {:>8} {:>11.3f} {:>10.2f} {:>6.1f}%", n, row.calls, static_cast<double>(row.total_ns) / 1e6,
        static_cast<double>(row.total_ns) / 1e3 / static_cast<double>(row.calls),
        sum.total_ns > 0 ? 100.0 * static_cast<double>(row.total_ns) / static_cast<double>(sum.total_ns) : 0.0);
    if (row.known_ns > 0) {
      double bw = row.bandwidth(), fl = row.flop_rate();
      auto [peak_bw, peak_fp32] = sum.peak(row.device);
      out += fmt::format(" {:>10.1f} {:>9.3f}", bw / 1e9, fl / 1e12);
      if (peak_bw > 0)
        out += fmt::format(" {:>7.1f}% {:>6.1f}%", 100 * bw / peak_bw, peak_fp32 > 0 ? 100 * fl / peak_fp32 : 0.0);
    }
    out += "\n";
  }
  return out;
}

// The recording to report: the current one so far, or the last.
struct Recording {
  std::vector<std::pair<int, Event>> events;
  std::vector<detail::DeviceRecord> devices;
  std::string no_devices;
  int64_t wall = 0;
};
Recording recording() {
  Registry& r = registry();
  Recording rec;
  if (enabled()) {
    rec.events = gather();
    rec.wall = clock_ns() - r.start_ns;
  } else {
    std::lock_guard<std::mutex> lock(r.mu);
    rec.events = r.last;
    rec.devices = r.device_last;
    rec.no_devices = r.no_devices;
    rec.wall = r.stop_ns - r.start_ns;
  }
  return rec;
}
}  // namespace

std::pair<double, double> DeviceSummary::peak(const std::string& device) const {
  for (const auto& [name, p] : peaks)
    if (name == device) return p;
  return {0, 0};
}

DeviceSummary device_summary() {
  Recording rec = recording();
  DeviceSummary sum = summarize_devices(rec.events, rec.devices);
  sum.wall_ns = std::max<int64_t>(rec.wall, 0);
  sum.missing = rec.no_devices;
  return sum;
}

std::string summary(size_t max_rows) {
  Recording rec = recording();
  const std::vector<std::pair<int, Event>>& events = rec.events;
  int64_t wall = rec.wall;
  struct Row {
    int64_t calls = 0, total_ns = 0;
  };
  std::map<std::pair<std::string, Kind>, Row> rows;
  for (const auto& [tid, e] : events) {
    if (e.ph != 'X') continue;  // (device work has its own table)
    Row& row = rows[{e.name, e.kind}];
    ++row.calls;
    row.total_ns += e.dur_ns;
  }
  std::vector<std::pair<std::pair<std::string, Kind>, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  std::string out = fmt::format("kiln profile: {} events over {:.3f} ms (spans nest, so levels overlap)\n",
                                events.size(), static_cast<double>(std::max<int64_t>(wall, 0)) / 1e6);
  out +=
      fmt::format("{:<44} {:<9} {:>8} {:>11} {:>10} {:>7}\n", "event", "kind", "calls", "total ms", "mean us", "share");
  size_t shown = 0;
  for (const auto& [key, row] : sorted) {
    if (shown++ == max_rows) {
      out += fmt::format("... and {} more\n", sorted.size() - max_rows);
      break;
    }
    std::string name = key.first.size() > 44 ? key.first.substr(0, 41) + "..." : key.first;
    out += fmt::format("{:<44} {:<9} {:>8} {:>11.3f} {:>10.2f} {:>6.1f}%\n", name, kind_name(key.second), row.calls,
                       static_cast<double>(row.total_ns) / 1e6,
                       static_cast<double>(row.total_ns) / 1e3 / static_cast<double>(row.calls),
                       wall > 0 ? 100.0 * static_cast<double>(row.total_ns) / static_cast<double>(wall) : 0.0);
  }
  if (!rec.no_devices.empty()) out += fmt::format("no device timelines: {}\n", rec.no_devices);
  out += device_table(summarize_devices(events, rec.devices), max_rows);
  return out;
}

Session::~Session() {
  try {
    stop(path_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln] profiler: %s\n", e.what());  // a destructor must not throw
  }
}

}  // namespace kiln::profiler
