// benchmarks/bench_main.cpp -- runs the benchmarks, then prints one table of ratios.
//
// Benchmarks are named "<case>/<impl>" (impl: kiln, torch, copy). The table shows each case's
// time per iteration for every impl, kiln's time divided by LibTorch's (below 1: kiln is
// faster), and for bandwidth cases the GB/s as a fraction of the copy loop's in the same run.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <kiln/kiln.h>

#include <map>
#include <string>

namespace {

struct Row {
  double ns = 0, bytes_per_s = 0;
};

class TableReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.run_type != Run::RT_Iteration) continue;
      std::string name = r.benchmark_name();
      size_t slash = name.find('/');  // "<case>/<impl>", then Google Benchmark's own suffixes
      if (slash == std::string::npos) continue;
      size_t end = name.find('/', slash + 1);
      Row& row = rows_[name.substr(0, slash)][name.substr(slash + 1, end - slash - 1)];
      row.ns = r.GetAdjustedRealTime();  // in the benchmark's time unit; we use ns everywhere
      auto it = r.counters.find("bytes_per_second");
      if (it != r.counters.end()) row.bytes_per_s = it->second;
    }
  }
  void Print() const {
    double copy_bw = 0;
    for (const auto& [c, impls] : rows_)
      if (auto it = impls.find("copy"); it != impls.end()) copy_bw = std::max(copy_bw, it->second.bytes_per_s);
    fmt::print("\n{:<28} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "case", "kiln", "LibTorch", "kiln/torch",
               "kiln GB/s", "of copy");
    for (const auto& [c, impls] : rows_) {
      auto k = impls.find("kiln"), t = impls.find("torch");
      if (k == impls.end()) continue;
      auto time = [](double ns) {
        return ns >= 1e6 ? fmt::format("{:.2f} ms", ns / 1e6) : ns >= 1e3 ? fmt::format("{:.2f} us", ns / 1e3) : fmt::format("{:.0f} ns", ns);
      };
      std::string torch = t == impls.end() ? "-" : time(t->second.ns);
      std::string ratio = t == impls.end() ? "-" : fmt::format("{:.2f}", k->second.ns / t->second.ns);
      std::string gbs = k->second.bytes_per_s > 0 ? fmt::format("{:.1f}", k->second.bytes_per_s / 1e9) : "-";
      std::string frac = k->second.bytes_per_s > 0 && copy_bw > 0 ? fmt::format("{:.0f}%", 100 * k->second.bytes_per_s / copy_bw) : "-";
      fmt::print("{:<28} {:>12} {:>12} {:>12} {:>10} {:>10}\n", c, time(k->second.ns), torch, ratio, gbs, frac);
    }
    fmt::print("\ncopy loop: {:.1f} GB/s on {} threads; kiln SIMD: {}\n", copy_bw / 1e9, kiln::num_threads(),
               kiln_isa());
  }
  static const char* kiln_isa();

 private:
  std::map<std::string, std::map<std::string, Row>> rows_;
};

}  // namespace

const char* TableReporter::kiln_isa() { return kiln::cpu_kernel_isa(); }

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.Print();
  benchmark::Shutdown();
  return 0;
}
