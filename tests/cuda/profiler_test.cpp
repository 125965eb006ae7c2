// tests/cuda/profiler_test.cpp -- the profiler's device timelines (runtime/profiler.h), through
// the host CUDA's CUPTI (tests/cuda/host/cupti_cuda.cpp) or a GPU's: every launch recorded
// exactly once, on its stream's track, named after the kiln op or fused group that queued it,
// its flow arrow from the host span that queued it; a library's kernels after the call that
// issued them; kernels replayed from a CUDA graph; everything finished by stop() flushed; the
// device table of the summary; the device's memory track. Without CUPTI (ctest
// cuda_profiler_without_cupti) or with a CUPTI that refuses (cuda_profiler_refused), the
// profiler says why once and records the host as before.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "jit/trace.h"
#include "runtime/cuda_internal.h"
#include "runtime/profiler.h"
#include "tests/cuda/cuda_test.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using test::kGpu;

std::string temp_file(const std::string& name) {
  return (fs::path(testing::TempDir()) / (name + "-" + std::to_string(::getpid()) + ".json")).string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

bool cupti_missing() {
  const char* e = std::getenv("KILN_CUDA_CUPTI");
  const char* r = std::getenv("KILN_HOST_CUPTI_REFUSE");
  return (e && std::string(e).find("nonexistent") != std::string::npos) || (r && std::string(r) == "1");
}

#define REQUIRE_CUPTI() \
  if (cupti_missing()) GTEST_SKIP() << "CUPTI is made unavailable here (the ctest that checks that)"

// The device events of a trace, and the host spans and flow starts by id.
struct Trace {
  std::vector<json> device;                         // "X" events of a device process (pid > 1)
  std::map<uint64_t, json> flow_starts;             // "s" by id
  std::map<uint64_t, std::vector<json>> flow_ends;  // "f" by id
  std::vector<json> host;                           // "X" events of the host (pid 1)
  std::vector<json> counters;                       // "C"
};
Trace parse(const json& t) {
  Trace out;
  for (const json& e : t["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "X") (e["pid"].get<int>() > 1 ? out.device : out.host).push_back(e);
    if (ph == "s") out.flow_starts[e["id"].get<uint64_t>()] = e;
    if (ph == "f") out.flow_ends[e["id"].get<uint64_t>()].push_back(e);
    if (ph == "C") out.counters.push_back(e);
  }
  return out;
}

TEST(CudaProfiler, EveryLaunchIsRecordedOnceNamedAfterItsOpAndTiedToItsSpan) {
  REQUIRE_CUDA();
  REQUIRE_CUPTI();
  Tensor x = randn({64, 100}).to(kGpu), w = randn({100, 32}).to(kGpu);
  cuda::synchronize();
  int64_t before = cuda::kernel_launches();
  std::string path = temp_file("cuda_profile");
  profiler::start();
  Tensor y = exp(x + 1.0);  // two generated kernels: add, exp
  Tensor z = matmul(y, w);  // cuBLAS's kernel, after matmul
  Tensor host = z.to(cpu);  // a copy to the host (it waits for the device)
  profiler::stop(path);
  int64_t launches = cuda::kernel_launches() - before;
  Trace t = parse(read_json(path));

  std::map<std::string, int> kernels;
  int kiln_kernels = 0;
  for (const json& e : t.device) {
    std::string cat = e["cat"];
    if (cat != "device kernel") continue;
    ++kernels[e["name"].get<std::string>()];
    std::string symbol = e["args"]["kernel"];
    if (symbol.rfind("kiln_", 0) == 0) ++kiln_kernels;
  }
  EXPECT_EQ(kiln_kernels, launches) << "every kiln launch exactly once";
  EXPECT_EQ(kernels["add"], 1);
  EXPECT_EQ(kernels["exp"], 1);
  bool gemm = false;
  for (const auto& [name, n] : kernels) gemm = gemm || name.rfind("matmul: ", 0) == 0;
  EXPECT_TRUE(gemm) << "the library's kernel after the call that issued it";
  bool copy = false;
  for (const json& e : t.device) copy = copy || (e["cat"] == "device memcpy" && e["args"]["bytes"] == 64 * 32 * 4);
  EXPECT_TRUE(copy) << "the copy to the host, with its bytes";

  // Each device event has a flow from a host span: the op's, whose name it carries. A flow
  // binds one start to one end (Perfetto draws one arrow an id).
  for (const auto& [id, ends] : t.flow_ends) EXPECT_EQ(ends.size(), 1u) << "flow " << id;
  for (const json& e : t.device) {
    if (e["cat"] != "device kernel") continue;
    bool tied = false;
    for (const auto& [id, ends] : t.flow_ends) {
      for (const json& f : ends) {
        if (f["pid"] != e["pid"] || f["tid"] != e["tid"] || f["ts"] != e["ts"]) continue;
        ASSERT_TRUE(t.flow_starts.count(id)) << "flow " << id << " has no start";
        const json& s = t.flow_starts.at(id);
        for (const json& h : t.host) {
          double ts = h["ts"], end = ts + h["dur"].get<double>(), at = s["ts"];
          if (h["tid"] == s["tid"] && ts <= at && at <= end && e["name"].get<std::string>().rfind(h["name"], 0) == 0)
            tied = true;
        }
      }
    }
    EXPECT_TRUE(tied) << e.dump() << " is not tied to the span that launched it";
  }
  // The device's stream is a track of its own process.
  EXPECT_GT(t.device.at(0)["pid"].get<int>(), 1);
  EXPECT_TRUE(t.device.at(0)["args"].contains("grid"));
  // The allocator's track per device.
  bool memory = false;
  for (const json& c : t.counters) memory = memory || c["name"] == "cuda:0 memory";
  EXPECT_TRUE(memory);
  // The device table, with the kiln kernels' rates.
  std::string table = profiler::summary();
  EXPECT_NE(table.find("device: "), std::string::npos) << table;
  EXPECT_NE(table.find("GB/s"), std::string::npos) << table;
  // The same rows for a program: the add's bytes (read x, write y) and its share of the time.
  profiler::DeviceSummary d = profiler::device_summary();
  EXPECT_EQ(d.missing, "");
  EXPECT_EQ(d.records, static_cast<int64_t>(t.device.size()));
  EXPECT_EQ(d.launches, kiln_kernels + 1);  // and cuBLAS's one
  EXPECT_GT(d.busy_ns, 0);
  EXPECT_LE(d.busy_ns, d.total_ns);
  EXPECT_LE(d.busy_ns, d.wall_ns);
  const profiler::DeviceKernel* add = nullptr;
  for (const profiler::DeviceKernel& k : d.kernels)
    if (k.name == "add") add = &k;
  ASSERT_NE(add, nullptr);
  EXPECT_TRUE(add->kiln);
  EXPECT_EQ(add->calls, 1);
  EXPECT_EQ(add->bytes, 2.0 * 64 * 100 * 4);
  EXPECT_EQ(add->flops, 64.0 * 100);
  EXPECT_GT(add->bandwidth(), 0);
  EXPECT_GT(d.peak("cuda:0").first, 0) << "the peak bandwidth from the device's attributes";
  for (size_t i = 1; i < d.kernels.size(); ++i) EXPECT_GE(d.kernels[i - 1].total_ns, d.kernels[i].total_ns);
  fs::remove(path);
}

TEST(CudaProfiler, KernelsReplayedFromACudaGraphAreRecordedUnderTheirGroupsNames) {
  REQUIRE_CUDA();
  REQUIRE_CUPTI();
  Tensor x = randn({256, 64}).to(kGpu);
  jit::Function f = jit::trace_tensors(
      [](std::span<const Tensor> in) { return std::vector<Tensor>{softmax(in[0] * 2.0, -1)}; }, {&x, 1}, "step");
  f.call({&x, 1});
  f.call({&x, 1});  // captured
  cuda::synchronize();
  std::string path = temp_file("cuda_graph_profile");
  profiler::start();
  for (int i = 0; i < 3; ++i) f.call({&x, 1});  // replays
  cuda::synchronize();
  profiler::stop(path);
  ASSERT_GE(f.stats().graph_replays, 3u);
  Trace t = parse(read_json(path));
  int replayed = 0;
  for (const json& e : t.device)
    if (e["cat"] == "device kernel" && e["args"].value("cuda graph", false)) {
      ++replayed;
      EXPECT_EQ(e["name"].get<std::string>().rfind("fused ", 0), 0u) << e.dump();
    }
  EXPECT_GE(replayed, 3) << "each replay's kernels";
  fs::remove(path);
}

TEST(CudaProfiler, WhatFinishedBeforeStopIsFlushed) {
  REQUIRE_CUDA();
  REQUIRE_CUPTI();
  Tensor x = randn({1000}).to(kGpu);
  profiler::start();
  for (int i = 0; i < 20; ++i) x = x * 1.0001;
  cuda::synchronize();
  profiler::stop();
  std::string table = profiler::summary();
  EXPECT_NE(table.find("mul"), std::string::npos) << table;
  // 20 launches of mul, each exactly once (the device table's row, after the host's).
  size_t at = table.find("\nmul ", table.find("device: "));
  ASSERT_NE(at, std::string::npos) << table;
  std::istringstream row(table.substr(at + 1));
  std::string name;
  int calls = 0;
  row >> name >> calls;
  EXPECT_EQ(calls, 20) << table;
}

// ctest cuda_profiler_without_cupti (KILN_CUDA_CUPTI names a missing file) and
// cuda_profiler_refused (the host CUPTI refuses, as a driver without permission does).
TEST(CudaProfilerWithoutCupti, SaysWhyOnceAndRecordsTheHost) {
  REQUIRE_CUDA();
  if (!cupti_missing()) GTEST_SKIP() << "CUPTI is available here (the ctests make it unavailable)";
  Tensor x = randn({100}).to(kGpu);
  testing::internal::CaptureStderr();
  for (int k = 0; k < 2; ++k) {
    profiler::start();
    Tensor y = exp(x);
    cuda::synchronize();
    profiler::stop();
  }
  std::string err = testing::internal::GetCapturedStderr();
  std::string why = "no device timelines: ";
  size_t first = err.find(why);
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find(why, first + 1), std::string::npos) << "said once: " << err;
  std::string table = profiler::summary();
  EXPECT_NE(table.find("exp"), std::string::npos) << "the host's spans: " << table;
  EXPECT_NE(table.find(why), std::string::npos) << table;
  EXPECT_EQ(table.find("device: "), std::string::npos) << table;
}

}  // namespace
}  // namespace kiln
