// benchmarks/bench_main.cpp -- runs the benchmarks, then prints one table of ratios.
//
// Benchmarks are named "<case>/<impl>" (impls: see jit_bench.cpp). The table shows each case's
// time per iteration for every impl, the traced/eager and kiln/LibTorch ratios, for bandwidth
// cases the GB/s as a fraction of the copy loop's in the same run, and for compute cases the
// GFLOP/s of kiln and LibTorch. --benchmark_filter=/torch runs LibTorch's cases alone
// (scripts/bench_torch_isolation.sh compares that with LibTorch after kiln in one process).
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <kiln/kiln.h>

#include "benchmarks/bench_cases.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct Row {
  double ns = 0, bytes_per_s = 0, flops_per_s = 0, peak_mb = -1, saved_mb = -1;
  bool reads_only = false;  // a copy loop counting only the bytes it reads
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
      std::string c = name.substr(0, slash);
      if (!rows_.count(c)) order_.push_back(c);
      std::string impl = name.substr(slash + 1, end - slash - 1);
      Row row;
      row.ns = r.GetAdjustedRealTime();  // in the benchmark's time unit; we use ns everywhere
      if (auto it = r.counters.find("bytes_per_second"); it != r.counters.end()) row.bytes_per_s = it->second;
      if (auto it = r.counters.find("FLOP/s"); it != r.counters.end()) row.flops_per_s = it->second;
      if (auto it = r.counters.find("peak_MB"); it != r.counters.end()) row.peak_mb = it->second;
      if (auto it = r.counters.find("saved_MB"); it != r.counters.end()) row.saved_mb = it->second;
      row.reads_only = r.report_label == kiln::bench::kReadsOnly;
      // With --benchmark_repetitions the table shows each impl's median repetition.
      std::vector<Row>& reps = runs_[c][impl];
      reps.push_back(row);
      std::vector<Row> sorted = reps;
      std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.ns < b.ns; });
      rows_[c][impl] = sorted[(sorted.size() - 1) / 2];
    }
  }
  // One row per case, in the order they ran: the time of each impl, the ratios that matter, the
  // bandwidth of the fastest kiln impl against the copy loop in the same case (or, without
  // one, the slowest copy from memory), and the FLOP rates of the fastest kiln and LibTorch
  // impls.
  void Print() const {
    static const char* kImpls[] = {"kiln", "kiln_op", "jit_bwd", "jit", "torch", "torch_op", "onednn"};
    double any_copy = 0;  // the slowest copy: the one memory (not a cache) bounds
    for (const auto& [c, impls] : rows_)
      if (auto it = impls.find("copy"); it != impls.end() && it->second.bytes_per_s > 0 && !it->second.reads_only)
        any_copy = any_copy == 0 ? it->second.bytes_per_s : std::min(any_copy, it->second.bytes_per_s);
    auto time = [](double ns) {
      return ns >= 1e6   ? fmt::format("{:.2f} ms", ns / 1e6)
             : ns >= 1e3 ? fmt::format("{:.2f} us", ns / 1e3)
                         : fmt::format("{:.0f} ns", ns);
    };
    auto rate = [](double r) { return r > 0 ? fmt::format("{:.1f}", r / 1e9) : std::string("-"); };
    size_t width = 26;
    for (const std::string& c : order_) width = std::max(width, c.size());
    fmt::print("\n{:<{}}", "case", width);
    for (const char* i : kImpls) fmt::print(" {:>10}", i);
    fmt::print(" {:>10} {:>10} {:>7} {:>7} {:>10} {:>10}\n", "jit/kiln", "best/torch", "GB/s", "of copy", "GFLOP/s",
               "torch GF/s");
    for (const std::string& c : order_) {
      const auto& impls = rows_.at(c);
      double best = 0, best_bw = 0, best_flops = 0, torch_best = 0, torch_flops = 0;
      fmt::print("{:<{}}", c, width);
      for (const char* i : kImpls) {
        auto it = impls.find(i);
        fmt::print(" {:>10}", it == impls.end() ? "-" : time(it->second.ns));
        if (it == impls.end() || i[0] == 'o') continue;  // oneDNN's column is for reference
        bool ours = i[0] != 't';
        double& b = ours ? best : torch_best;
        if (b == 0 || it->second.ns < b) b = it->second.ns;
        double& f = ours ? best_flops : torch_flops;
        f = std::max(f, it->second.flops_per_s);
        if (ours) best_bw = std::max(best_bw, it->second.bytes_per_s);
      }
      auto k = impls.find("kiln"), j = impls.find("jit"), cp = impls.find("copy");
      std::string jk = k != impls.end() && j != impls.end() ? fmt::format("{:.2f}", j->second.ns / k->second.ns) : "-";
      std::string bt = best > 0 && torch_best > 0 ? fmt::format("{:.2f}", best / torch_best) : "-";
      double copy_bw = cp != impls.end() ? cp->second.bytes_per_s : any_copy;
      std::string frac = best_bw > 0 && copy_bw > 0 ? fmt::format("{:.0f}%", 100 * best_bw / copy_bw) : "-";
      fmt::print(" {:>10} {:>10} {:>7} {:>7} {:>10} {:>10}\n", jk, bt, rate(best_bw), frac, rate(best_flops),
                 rate(torch_flops));
    }
    fmt::print(
        "\nkiln = eager from primitive ops, kiln_op = kiln's own op, jit = traced (fused kernels; a\n"
        "training step traced whole), jit_bwd = a traced loss and its compiled backward, then the\n"
        "optimizer eagerly,\n"
        "torch = LibTorch eager from the same primitive ops, torch_op = LibTorch's own op (TorchScript\n"
        "for call_cached), onednn = Debian's oneDNN called directly on its own OpenMP threads,\n"
        "NCHW in and out (for reference: kiln runs it inside, one single-threaded call per block).\n"
        "best/torch: fastest kiln impl over fastest LibTorch impl (below 1: kiln is faster). GB/s:\n"
        "fastest kiln impl; of copy: against the copy loop moving the same bytes (for sum_16M, the\n"
        "bytes it reads: read bandwidth against read bandwidth). GFLOP/s: fastest kiln impl; torch\n"
        "GF/s: fastest LibTorch impl (_bwd: both gradients, twice the forward's FLOPs).\n");
    if (any_copy > 0) fmt::print("copy loop from memory: {:.1f} GB/s (reads + writes)\n", any_copy / 1e9);
    for (const std::string& c : order_)
      if (auto it = rows_.at(c).find("copy"); it != rows_.at(c).end() && it->second.reads_only)
        fmt::print("{}: the copy loop reads {:.1f} GB/s (and writes as much)\n", c, it->second.bytes_per_s / 1e9);
    print_gemm_reference();
    print_step_memory();
    print_profiler_cost();
    fmt::print("kiln SIMD: {}; threads: {}\n", kiln_isa(), kiln::num_threads());
#ifdef KILN_HAVE_TORCH
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    fmt::print("LibTorch: as many threads; OMP_WAIT_POLICY={}\n",
               wait ? wait : "unset (its OpenMP threads spin between loops)");
#endif
  }
  static const char* kiln_isa();

 private:
  // The training block's conv rate beside the GEMM rate of the same run, for kiln and LibTorch.
  void print_gemm_reference() const {
    auto flops = [&](const std::string& c, const char* impl) {
      auto r = rows_.find(c);
      if (r == rows_.end()) return 0.0;
      auto i = r->second.find(impl);
      return i == r->second.end() ? 0.0 : i->second.flops_per_s;
    };
    for (const char* impl : {"kiln", "torch"}) {
      double gemm = flops("matmul_1024", impl), block = flops(kiln::bench::kBlockName, impl);
      if (gemm > 0 && block > 0)
        fmt::print("{}: {} convs at {:.1f} GFLOP/s, {:.0f}% of matmul_1024's {:.1f} GFLOP/s\n", impl,
                   kiln::bench::kBlockName, block / 1e9, 100 * block / gemm, gemm / 1e9);
    }
  }

  // What recording a profile costs, per call of two eager ops and per cached jit call.
  void print_profiler_cost() const {
    auto r = rows_.find("call_cached[1]");
    if (r == rows_.end()) return;
    for (const char* impl : {"kiln", "jit"}) {
      auto off = r->second.find(impl), on = r->second.find(std::string(impl) + "_profiled");
      if (off == r->second.end() || on == r->second.end()) continue;
      fmt::print("profiler: call_cached[1] {} takes {:.0f} ns off, {:.0f} ns recording ({} events per call)\n", impl,
                 off->second.ns, on->second.ns, std::string(impl) == "kiln" ? "2 op" : "1 jit-call and 1 kernel");
    }
  }

  // Training steps: each kiln way's peak memory per step, and the GEMM limits.
  void print_step_memory() const {
    for (const std::string& c : order_) {
      std::string line;
      for (const char* impl : {"kiln", "jit_bwd", "jit"})
        if (auto it = rows_.at(c).find(impl); it != rows_.at(c).end() && it->second.peak_mb >= 0)
          line += fmt::format(" {} {:.1f} MB,", impl, it->second.peak_mb);
      if (line.empty()) continue;
      line.pop_back();
      if (auto it = rows_.at(c).find("jit_bwd"); it != rows_.at(c).end() && it->second.saved_mb >= 0)
        line += fmt::format(" (jit_bwd's forward saves {:.1f} MB for its backward)", it->second.saved_mb);
      fmt::print("{}: peak memory per step:{}\n", c, line);
    }
    // Each step against its GEMM limit: its matmul FLOPs at matmul_1024's rate in this run.
    auto mm = rows_.find("matmul_1024");
    if (mm == rows_.end() || !mm->second.count("kiln") || mm->second.at("kiln").flops_per_s <= 0) return;
    double gemm = mm->second.at("kiln").flops_per_s;
    for (auto [name, flops] : {std::pair{kiln::bench::mlp_step_name(256), kiln::bench::mlp_step_flops(256)},
                               std::pair{kiln::bench::kEncoderName, kiln::bench::encoder_step_flops()}}) {
      auto step = rows_.find(name);
      if (step == rows_.end()) continue;
      double limit_ns = flops / gemm * 1e9;
      for (const char* impl : {"kiln", "jit_bwd", "jit"})
        if (auto it = step->second.find(impl); it != step->second.end())
          fmt::print("{} {}: {:.2f}x its GEMM limit ({:.2f} GFLOP at matmul_1024's {:.1f} GFLOP/s: {:.2f} ms)\n", name,
                     impl, it->second.ns / limit_ns, flops / 1e9, gemm / 1e9, limit_ns / 1e6);
    }
    // The example models' steps (models_bench.cpp): each counts its GEMM and convolution FLOPs,
    // so its time over the limit is matmul_1024's rate over its own.
    for (const std::string& c : order_) {
      if (c.rfind(kiln::bench::model_case(""), 0) != 0) continue;
      std::string line;
      double step_flops = 0;
      for (const char* impl : {"kiln", "jit", "torch"})
        if (auto it = rows_.at(c).find(impl); it != rows_.at(c).end() && it->second.flops_per_s > 0) {
          line += fmt::format(" {} {:.2f}x,", impl, gemm / it->second.flops_per_s);
          step_flops = it->second.flops_per_s * it->second.ns / 1e9;
        }
      if (line.empty()) continue;
      line.pop_back();
      fmt::print(
          "{}: times its FLOP limit ({:.2f} GFLOP of GEMMs and convolutions at matmul_1024's {:.1f} GFLOP/s):{}\n", c,
          step_flops / 1e9, gemm / 1e9, line);
    }
  }

  std::map<std::string, std::map<std::string, Row>> rows_;               // the median repetition
  std::map<std::string, std::map<std::string, std::vector<Row>>> runs_;  // every repetition
  std::vector<std::string> order_;                                       // the cases in the order they ran
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
