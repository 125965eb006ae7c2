// benchmarks/distributed_bench.cpp -- all_reduce bandwidth between processes, with the
// per-collective check on and off, and a DistributedDataParallel training step against the same
// step without DDP (every rank running it at once, on its own core: the compute alone). Run
// under the launcher, one process per rank:
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
#include <optional>

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

// An MLP of 1.3 M parameters (5.3 MB of gradients: the 1 MB first bucket and one more), at a
// batch of 64 per rank.
struct Mlp : nn::Module {
  nn::Linear fc1{256, 1024}, fc2{1024, 1024}, fc3{1024, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor operator()(const Tensor& x) { return fc3(relu(fc2(relu(fc1(x))))); }
};

enum class Step { Single, Ddp, DdpTraced };

void BM_TrainStep(benchmark::State& s, Step kind, bool check) {
  distributed::ProcessGroup& pg = check ? *pg_checked : *pg_unchecked;
  manual_seed(1);
  Mlp net;
  std::optional<nn::DistributedDataParallel> ddp;
  if (kind != Step::Single) ddp.emplace(net, pg);
  optim::SGD opt(net.parameters(), 0.01, {.momentum = 0.9});
  Tensor x = randn({64, 256}), y = randint(0, 10, {64});
  auto step = [&](Tensor a, Tensor b) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net(a), b);
    loss.backward();
    opt.step();
    return loss;
  };
  std::optional<jit::Function> traced;
  if (kind == Step::DdpTraced) traced.emplace(jit::trace(step, {x, y}, "ddp_step"));
  auto run = [&] { return traced ? (*traced)(x, y) : step(x, y); };
  for (int i = 0; i < 3; ++i) run();
  distributed::barrier(pg);  // start together
  for (auto _ : s) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    s.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  distributed::barrier(pg);
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
          ->Arg(mb)
          ->Iterations(iters)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(fmt::format("all_reduce_{}MB/no_check", mb).c_str(), BM_AllReduce, false)
          ->Arg(mb)
          ->Iterations(iters)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
    for (bool check : {true, false}) {
      const char* c = check ? "check" : "no_check";
      benchmark::RegisterBenchmark(fmt::format("train_step_mlp/ddp/{}", c).c_str(), BM_TrainStep, Step::Ddp, check)
          ->Iterations(40)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(fmt::format("train_step_mlp/ddp_traced/{}", c).c_str(), BM_TrainStep,
                                   Step::DdpTraced, check)
          ->Iterations(40)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark("train_step_mlp/single", BM_TrainStep, Step::Single, true)
        ->Iterations(40)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
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
