// benchmarks/distributed_bench.cpp -- all_reduce bandwidth between processes, with the
// per-collective check on and off. Run under the launcher, one process per rank:
//
//   build-release/tools/kiln-run -n 2 build-release/benchmarks/kiln_dist_bench
//
// Every rank runs the same cases with the same fixed iteration counts (Google Benchmark's
// adaptive counts could differ between ranks, and a collective needs every rank); rank 0
// reports. Bandwidth is the bus bandwidth NCCL's tests report: 2 (n - 1) / n of the bytes per
// rank per second, what each link carries in a ring all-reduce.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>
#include <memory>

using namespace kiln;

namespace {

std::unique_ptr<distributed::ProcessGroup> g_pg;
distributed::ProcessGroup* pg_checked = nullptr;
distributed::ProcessGroup* pg_unchecked = nullptr;

void BM_AllReduce(benchmark::State& s, bool check) {
  distributed::ProcessGroup& pg = check ? *pg_checked : *pg_unchecked;
  int64_t bytes = s.range(0) << 20;
  Tensor t = ones({bytes / 4});
  distributed::all_reduce(pg, t);  // warm the connections' buffers
  for (auto _ : s) {
    auto t0 = std::chrono::steady_clock::now();
    distributed::all_reduce(pg, t);
    s.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  int n = pg.world_size();
  double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  s.counters["busbw"] = benchmark::Counter(bus * double(bytes) * double(s.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    distributed::Options o = distributed::options_from_env();
    distributed::Options o2 = o;
    o.check = true;
    // A second group (on the next port) without the check, so both settings run in one job.
    o2.check = false;
    o2.master_port = o.master_port + 1;
    auto checked = std::make_unique<distributed::ProcessGroup>(o);
    auto unchecked = std::make_unique<distributed::ProcessGroup>(o2);
    pg_checked = checked.get();
    pg_unchecked = unchecked.get();
    for (int64_t mb : {1, 4, 16, 64}) {
      int iters = mb >= 16 ? 10 : 40;
      benchmark::RegisterBenchmark(fmt::format("all_reduce_{}MB/check", mb).c_str(), BM_AllReduce, true)
          ->Arg(mb)->Iterations(iters)->UseManualTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(fmt::format("all_reduce_{}MB/no_check", mb).c_str(), BM_AllReduce, false)
          ->Arg(mb)->Iterations(iters)->UseManualTime()->Unit(benchmark::kMillisecond);
    }
    benchmark::Initialize(&argc, argv);
    if (checked->rank() != 0) {  // rank 0 reports
      std::freopen("/dev/null", "w", stdout);
      std::freopen("/dev/null", "w", stderr);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    distributed::barrier(*checked);
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln_dist_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
