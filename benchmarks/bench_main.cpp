// benchmarks/bench_main.cpp -- runs the benchmarks, then prints one table of ratios.
//
// Benchmarks are named "<case>/<impl>" (impls: see jit_bench.cpp). The table shows each case's
// time per iteration for every impl, the traced/eager and kiln/LibTorch ratios, and for
// bandwidth cases the GB/s as a fraction of the copy loop's in the same run.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <kiln/kiln.h>

#include "benchmarks/bench_cases.h"

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
  // One row per case: the time of each impl, the ratios that matter, and the bandwidth of the
  // fastest kiln impl against the copy loop in the same case (or, without one, the slowest).
  void Print() const {
    static const char* kImpls[] = {"kiln", "kiln_op", "jit", "torch", "torch_op"};
    double any_copy = 0;  // the slowest copy: the one memory (not a cache) bounds
    for (const auto& [c, impls] : rows_)
      if (auto it = impls.find("copy"); it != impls.end() && it->second.bytes_per_s > 0)
        any_copy = any_copy == 0 ? it->second.bytes_per_s : std::min(any_copy, it->second.bytes_per_s);
    auto time = [](double ns) {
      return ns >= 1e6 ? fmt::format("{:.2f} ms", ns / 1e6) : ns >= 1e3 ? fmt::format("{:.2f} us", ns / 1e3) : fmt::format("{:.0f} ns", ns);
    };
    fmt::print("\n{:<30}", "case");
    for (const char* i : kImpls) fmt::print(" {:>10}", i);
    fmt::print(" {:>10} {:>10} {:>9} {:>8}\n", "jit/kiln", "best/torch", "GB/s", "of copy");
    for (const auto& [c, impls] : rows_) {
      double best = 0, best_bw = 0, torch_best = 0;
      fmt::print("{:<30}", c);
      for (const char* i : kImpls) {
        auto it = impls.find(i);
        fmt::print(" {:>10}", it == impls.end() ? "-" : time(it->second.ns));
        if (it == impls.end()) continue;
        bool ours = i[0] != 't';
        double& b = ours ? best : torch_best;
        if (b == 0 || it->second.ns < b) b = it->second.ns;
        if (ours) best_bw = std::max(best_bw, it->second.bytes_per_s);
      }
      auto k = impls.find("kiln"), j = impls.find("jit"), cp = impls.find("copy");
      std::string jk = k != impls.end() && j != impls.end() ? fmt::format("{:.2f}", j->second.ns / k->second.ns) : "-";
      std::string bt = best > 0 && torch_best > 0 ? fmt::format("{:.2f}", best / torch_best) : "-";
      double copy_bw = cp != impls.end() ? cp->second.bytes_per_s : any_copy;
      std::string gbs = best_bw > 0 ? fmt::format("{:.1f}", best_bw / 1e9) : "-";
      std::string frac = best_bw > 0 && copy_bw > 0 ? fmt::format("{:.0f}%", 100 * best_bw / copy_bw) : "-";
      fmt::print(" {:>10} {:>10} {:>9} {:>8}\n", jk, bt, gbs, frac);
    }
    fmt::print("\nkiln = eager from primitive ops, kiln_op = kiln's own op, jit = traced (fused kernels),\n"
               "torch = LibTorch eager from the same primitive ops, torch_op = LibTorch's own op (TorchScript\n"
               "for call_cached). best/torch: fastest kiln impl over fastest LibTorch impl (below 1: kiln is\n"
               "faster). GB/s: fastest kiln impl; of copy: against the copy loop moving the same bytes.\n");
    fmt::print("copy loop from memory: {:.1f} GB/s on {} threads; kiln SIMD: {}\n", any_copy / 1e9, kiln::num_threads(),
               kiln_isa());
  }
  static const char* kiln_isa();

 private:
  std::map<std::string, std::map<std::string, Row>> rows_;
};

}  // namespace

const char* TableReporter::kiln_isa() { return kiln::cpu_kernel_isa(); }

int main(int argc, char** argv) {
  // A child run by jit_bench.cpp to time a first call in a fresh process.
  if (argc == 2 && std::string(argv[1]) == "--kiln-first-call") return kiln::bench::first_call_probe();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.Print();
  benchmark::Shutdown();
  return 0;
}
