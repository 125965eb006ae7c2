// tests/jit/profiler_test.cpp -- the profiler's Chrome trace, read back with nlohmann-json: the
// events a run makes (eager ops with their input types, autograd nodes, jit calls with their
// kernels inside, compiles, parallel chunks on the pool's threads, memory counters), spans that
// nest per thread, thread ids that match named threads, the summary table, the scoped session
// and KILN_PROFILE for a whole run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "jit/trace.h"
#include "runtime/api.h"
#include "runtime/files.h"
#include "runtime/parallel.h"
#include "runtime/profiler.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_file(const std::string& name) {
  return (fs::path(testing::TempDir()) / (name + "-" + std::to_string(::getpid()) + ".json")).string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);  // throws on invalid JSON
}

// The spans ("X") of one thread nest: sorted by start, each lies inside the open span above it
// or begins after it ends (to the printed microsecond).
void expect_nested(std::vector<const json*> spans, int tid) {
  std::sort(spans.begin(), spans.end(), [](const json* a, const json* b) {
    double ta = (*a)["ts"], tb = (*b)["ts"];
    return ta != tb ? ta < tb : (*a)["dur"].get<double>() > (*b)["dur"].get<double>();
  });
  std::vector<double> open_ends;
  const double slack = 0.002;  // microseconds: both ends are printed to the nanosecond
  for (const json* e : spans) {
    double ts = (*e)["ts"], end = ts + (*e)["dur"].get<double>();
    while (!open_ends.empty() && ts >= open_ends.back() - slack) open_ends.pop_back();
    if (!open_ends.empty()) {
      EXPECT_LE(end, open_ends.back() + slack) << "thread " << tid << ": " << e->dump() << " overlaps its parent";
    }
    open_ends.push_back(end);
  }
}

TEST(Profiler, TheTraceHoldsEveryKindOfEventNestedPerThread) {
  bool fusion = jit::fusion_enabled();  // kernels need fusion (the suite also runs with it off)
  jit::set_fusion_enabled(true);
  struct Restore {
    bool on;
    ~Restore() { jit::set_fusion_enabled(on); }
  } restore{fusion};
  manual_seed(3);
  Tensor w = randn({64, 64}, f32).requires_grad_();
  Tensor x = randn({256, 64});
  // Long enough (tens of ms) that a pool worker gets a core and takes a chunk even while other
  // tests load the machine (with 1M elements the caller sometimes ran every chunk itself).
  Tensor big = randn({1 << 23});
  auto fn = [&](Tensor a) { return softmax(matmul(a, w), -1).sum(); };
  jit::Function f = jit::trace(fn, {x});
  std::string path = temp_file("profile");

  profiler::start();
  for (int i = 0; i < 4; ++i) Tensor y = exp(big) * 2;  // parallel eager ops
  Tensor loss = (tanh(matmul(x, w)) * 3).sum();
  loss.backward();     // autograd nodes
  Tensor fast = f(x);  // a jit call: trace and compile, then its kernels
  fast.backward();
  f(x);  // a hit
  profiler::stop(path);

  json trace = read_json(path);
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<int, std::string> thread_names;
  std::map<int, std::vector<const json*>> spans;
  std::map<std::string, int> by_cat;
  bool op_with_types = false, kernel_in_jit = false, chunk_on_worker = false, hit = false, compile_phase = false;
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid")) << e.dump();
    std::string ph = e["ph"];
    int tid = e["tid"];
    if (ph == "M") {
      if (e["name"] == "thread_name") thread_names[tid] = e["args"]["name"];
      continue;
    }
    ASSERT_TRUE(e.contains("ts") && e.contains("name") && e.contains("cat")) << e.dump();
    by_cat[e["cat"]]++;
    if (ph == "X") {
      ASSERT_GE(e["dur"].get<double>(), 0) << e.dump();
      spans[tid].push_back(&e);
    }
    if (e["cat"] == "op" && e["args"].contains("inputs") &&
        e["args"]["inputs"].get<std::string>().find("f32[256,64]") != std::string::npos)
      op_with_types = true;
    if (e["cat"] == "jit" && e["args"].contains("call") && e["args"]["call"] == "hit") hit = true;
    if (e["cat"] == "compile" && (e["name"] == "LLVM optimize" || e["name"] == "disk cache read")) compile_phase = true;
    if (e["cat"] == "parallel" && thread_names[tid].rfind("kiln worker", 0) == 0) chunk_on_worker = true;
  }
  // Kernels run inside the jit call that ran them, on its thread.
  for (const auto& [tid, list] : spans) {
    for (const json* k : list) {
      if ((*k)["cat"] != "kernel") continue;
      EXPECT_GT((*k)["args"]["bytes"].get<int64_t>(), 0);
      EXPECT_EQ((*k)["name"].get<std::string>().rfind("fused ", 0), 0u) << k->dump();
      for (const json* j : list)
        if ((*j)["cat"] == "jit" && (*j)["ts"] <= (*k)["ts"] &&
            (*k)["ts"].get<double>() + (*k)["dur"].get<double>() <=
                (*j)["ts"].get<double>() + (*j)["dur"].get<double>() + 0.002)
          kernel_in_jit = true;
    }
    expect_nested(list, tid);
  }
  for (const auto& [tid, list] : spans) EXPECT_TRUE(thread_names.count(tid)) << "thread " << tid << " has no name";
  for (const char* cat : {"op", "autograd", "jit", "kernel", "compile", "memory"}) EXPECT_GT(by_cat[cat], 0) << cat;
  EXPECT_TRUE(op_with_types);
  EXPECT_TRUE(kernel_in_jit);
  EXPECT_TRUE(hit);
  EXPECT_TRUE(compile_phase);
  if (num_threads() > 1) {
    EXPECT_TRUE(chunk_on_worker) << "no parallel_for chunk on a pool thread";
  }

  std::string table = profiler::summary();
  EXPECT_NE(table.find("calls"), std::string::npos) << table;
  EXPECT_NE(table.find("@"), std::string::npos) << table;  // the jit call's row
  EXPECT_NE(table.find("matmul"), std::string::npos) << table;
  fs::remove(path);
}

TEST(Profiler, NothingIsRecordedWhileOff) {
  profiler::start();
  profiler::stop();
  Tensor a = randn({8});
  (void)(a * 2);
  std::string path = temp_file("off");
  profiler::stop(path);  // stopping again writes the (empty) last recording
  json trace = read_json(path);
  for (const json& e : trace["traceEvents"]) EXPECT_EQ(e["ph"], "M") << e.dump();
  fs::remove(path);
}

TEST(Profiler, ASessionWritesItsFileWhenItEnds) {
  std::string path = temp_file("session");
  {
    profiler::Session s(path);
    (void)(randn({4}) + 1);
  }
  json trace = read_json(path);
  bool add = false;
  for (const json& e : trace["traceEvents"]) add = add || e["name"] == "add";
  EXPECT_TRUE(add);
  fs::remove(path);
}

// KILN_PROFILE=path profiles a whole process and writes at exit: this test runs its own binary
// again with it set, on a test that does a little work.
TEST(Profiler, KilnProfileWritesAWholeRunAtExit) {
  std::string path = temp_file("whole-run");
  fs::remove(path);
  std::optional<std::string> out =
      files::run_program({"/proc/self/exe", "--gtest_filter=ProfilerChild.DoesALittleWork"}, {"KILN_PROFILE=" + path});
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(fs::exists(path)) << *out;
  json trace = read_json(path);
  bool mul = false;
  for (const json& e : trace["traceEvents"]) mul = mul || e["name"] == "mul";
  EXPECT_TRUE(mul);
  fs::remove(path);
}

TEST(ProfilerChild, DoesALittleWork) { EXPECT_EQ((full({3}, 2.0) * 4).sum().item<double>(), 24.0); }

}  // namespace
}  // namespace kiln
