// runtime/profiler.cpp -- see profiler.h. Each thread appends to a buffer of its own (its lock is
// only ever contended by stop()); stop() gathers the buffers and writes Chrome's trace format:
// complete events ("ph":"X", microseconds), counter events ("ph":"C") and thread names ("M").
#include "runtime/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
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
  char ph;  // 'X' a span, 'C' a counter sample
  Kind kind;
  std::string name;
  std::string args;  // the inside of a JSON object: "k":v,...
  int64_t ts_ns;
  int64_t dur_ns;
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
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: KILN_PROFILE writes at exit
  return *r;
}

int64_t now_ns() {
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

std::string trace_json(const std::vector<std::pair<int, Event>>& events) {
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
    out += fmt::format(",\n{{\"ph\":\"{}\",\"cat\":\"{}\",\"name\":", e.ph, kind_name(e.kind));
    append_json_string(out, e.name);
    out += fmt::format(",\"pid\":1,\"tid\":{},\"ts\":{:.3f}", tid, static_cast<double>(e.ts_ns) / 1e3);
    if (e.ph == 'X') out += fmt::format(",\"dur\":{:.3f}", static_cast<double>(e.dur_ns) / 1e3);
    out += ",\"args\":{" + e.args + "}}";
  }
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
  start_ns_ = now_ns();
  slot_ = b.events.size();
  b.events.push_back(Event{'X', kind, std::string(name), {}, start_ns_, -1});
}

void Scope::end() {
  int64_t t = now_ns();
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
  b.events.push_back(Event{'C', Kind::Memory, std::string(name), std::move(args), now_ns(), 0});
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
    r.start_ns = now_ns();
    r.stop_ns = -1;
  }
  detail::g_on.store(true, std::memory_order_relaxed);
}

void stop(const std::string& path) {
  bool was_on = detail::g_on.exchange(false);
  Registry& r = registry();
  if (was_on) {
    std::vector<std::pair<int, Event>> events = gather();
    std::lock_guard<std::mutex> lock(r.mu);
    r.last = std::move(events);
    r.stop_ns = now_ns();
  }
  if (path.empty()) return;
  std::vector<std::pair<int, Event>> events;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    events = r.last;
  }
  files::write_atomic(path, trace_json(events), "profiler");
}

std::string summary(size_t max_rows) {
  Registry& r = registry();
  std::vector<std::pair<int, Event>> events;
  int64_t wall;
  if (enabled()) {
    events = gather();
    wall = now_ns() - r.start_ns;
  } else {
    std::lock_guard<std::mutex> lock(r.mu);
    events = r.last;
    wall = r.stop_ns - r.start_ns;
  }
  struct Row {
    int64_t calls = 0, total_ns = 0;
  };
  std::map<std::pair<std::string, Kind>, Row> rows;
  for (const auto& [tid, e] : events) {
    if (e.ph != 'X') continue;
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
