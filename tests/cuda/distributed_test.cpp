// tests/cuda/distributed_test.cpp -- collectives on CUDA tensors through NCCL, across 2
// processes on the host CUDA (rank r on cuda:r, its host NCCL exchanging through files): every
// collective and dtype against the double-precision result of the ranks' operands, the
// asynchronous form ordered by streams alone, the all_reduce op and its gradient, a shape
// mismatch named before NCCL sees it, a rank hung in NCCL failing the others within the timeout,
// ranks that disagree at their first collective named (not stuck in init), the communicator made
// on devices full of cached blocks, and an MLP trained data-parallel on cuda:N to the
// parameters one CPU process gets on the whole batch.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "tests/cuda/cuda_test.h"
#include "tests/cuda/full_device.h"
#include "tests/distributed/ranks.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using distributed::ReduceOp;
using test::fresh_dir;
using test::run_ranks;
using test::text_of;

constexpr DType kDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8};

// Rank r's operand: distinct per rank, exact in f16 and bf16, small enough for u8 sums.
Tensor operand(int r, DType t) { return (arange(12).reshape({3, 4}) * (r + 1) + r).to(t); }

constexpr int64_t kBatch = 8;
constexpr int kSteps = 3;

struct Mlp : nn::Module {
  nn::Linear fc1{6, 16}, fc2{16, 3};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(relu(fc1(x))); }
};

// kSteps of SGD with momentum on rank `rank`'s share of a fixed batch, on `device` (the whole
// batch, alone, when pg is null); the parameters, on the CPU.
std::vector<Tensor> train_mlp(Device device, distributed::ProcessGroup* pg) {
  manual_seed(3);
  Mlp net;
  Tensor x = randn({kBatch, 6}), y = randn({kBatch, 3});
  net.to(device);
  int rank = pg ? pg->rank() : 0, world = pg ? pg->world_size() : 1;
  int64_t share = kBatch / world;
  Tensor xs = x.narrow(0, rank * share, share).to(device), ys = y.narrow(0, rank * share, share).to(device);
  std::optional<nn::DistributedDataParallel> ddp;
  if (pg) ddp.emplace(net, *pg, nn::DdpOptions{.bucket_bytes = 512, .first_bucket_bytes = 256});
  optim::SGD opt(net.parameters(), 0.1, {.momentum = 0.9});
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    mse_loss(net(xs), ys).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : net.parameters()) out.push_back(p.detach().to(cpu));
  return out;
}

// ---- the child: one rank ---------------------------------------------------------------

void collectives(distributed::ProcessGroup& pg, Device d, const std::string& dir) {
  int r = pg.rank(), n = pg.world_size();
  auto out = [&](const std::string& name, const Tensor& t) {
    ASSERT_EQ(t.device(), d) << name;
    Tensor host = t.to(cpu);  // NumPy has no bf16: saved as f32, exactly
    save_npy(host.dtype() == DType::BF16 ? host.to(DType::F32) : host, fmt::format("{}/{}.r{}.npy", dir, name, r));
  };
  for (DType t : kDTypes) {
    std::string name(dtype_name(t));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean}) {
      if (op == ReduceOp::Mean && !is_float(t)) continue;
      Tensor x = operand(r, t).to(d);
      distributed::all_reduce(pg, x, op);
      out(fmt::format("all_reduce_{}_{}", distributed::reduce_op_name(op), name), x);
    }
    Tensor b = operand(r, t).to(d);
    distributed::broadcast(pg, b, n - 1);
    out("broadcast_" + name, b);
    out("all_gather_" + name, distributed::all_gather(pg, operand(r, t).to(d)));
    Tensor rows = operand(r, t).reshape({12, 1}).narrow(0, 0, 3 * n).to(d);
    out("reduce_scatter_" + name, distributed::reduce_scatter(pg, rows, ReduceOp::Sum));
  }
  // A non-contiguous operand (reduced through a copy, written back).
  Tensor tr = operand(r, DType::F32).to(d).transpose(0, 1);
  distributed::all_reduce(pg, tr);
  out("all_reduce_transposed", tr);
  // In flight at once, on a stream of the caller's own: wait() orders that stream after the
  // collectives, and what it runs next (the product) reads their results.
  cuda::Stream mine = cuda::Stream::create(d.index);
  cuda::StreamGuard on(mine);
  Tensor a = operand(r, DType::F64).to(d), c = operand(r, DType::F64).to(d) * 2;
  distributed::Work wa = distributed::all_reduce_async(pg, a), wc = distributed::all_reduce_async(pg, c, ReduceOp::Max);
  wa.wait();
  wc.wait();
  out("async_product", a * c);
  mine.synchronize();
  EXPECT_TRUE(wa.completed() && wc.completed());
  // The all_reduce op (the differentiable, traceable form): its gradient is the sum of every
  // rank's upstream gradient.
  Tensor w = operand(r, DType::F32).to(d).requires_grad_(true);
  Tensor reduced = distributed::all_reduced(pg, w);
  out("all_reduced", reduced.detach());
  sum(reduced * float(r + 1)).backward();
  out("all_reduced_grad", w.grad());
}

TEST(CudaDistChild, DISABLED_Rank) {
  const char* which = std::getenv("KILN_DIST_CASE");
  const char* dir = std::getenv("KILN_DIST_DIR");
  ASSERT_TRUE(which && dir) << "run by the CudaDistributed tests, which set KILN_DIST_CASE and KILN_DIST_DIR";
  std::string c = which;
  distributed::Options o = distributed::options_from_env();
  try {
    distributed::ProcessGroup pg(o);
    Device d = cuda::device(pg.rank() % cuda::device_count());
    if (c == "collectives") collectives(pg, d, dir);
    if (c == "mismatch") {
      Tensor x = zeros({3, pg.rank() == 1 ? 5 : 4}, DType::F32, d);
      distributed::all_reduce(pg, x);
    }
    if (c == "hang") {  // rank 1 hangs in NCCL (KILN_HOST_NCCL_HANG_RANK)
      Tensor x = ones({4}, DType::F32, d);
      distributed::all_reduce(pg, x);
      x.to(cpu);  // returns once the watchdog has aborted the communicator
      distributed::all_reduce(pg, x);
    }
    if (c == "first_differs") {  // the first CUDA collective meets a CPU barrier
      if (pg.rank() == 0) {
        Tensor x = ones({4}, DType::F32, d);
        distributed::all_reduce(pg, x);
      } else {
        distributed::barrier(pg);
      }
    }
    if (c == "full_device") {  // NCCL's buffers come on a device full of kiln's cached blocks
      Tensor x = operand(pg.rank(), DType::F32).to(d);
      test::NearlyFull full(int64_t{40} << 20, int64_t{1} << 20, d.index);
      distributed::all_reduce(pg, x);
      save_npy(x.to(cpu), fmt::format("{}/full_device.r{}.npy", dir, pg.rank()));
    }
    if (c == "ddp") {
      std::vector<Tensor> params = train_mlp(d, &pg);
      for (size_t i = 0; i < params.size(); ++i) save_npy(params[i], fmt::format("{}/p{}.r{}.npy", dir, i, o.rank));
    }
  } catch (const Error& e) {
    std::ofstream(fmt::format("{}/error.r{}.txt", dir, o.rank)) << e.what();
  }
}

// ---- the parent --------------------------------------------------------------------------

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.type().str(), want.type().str()) << what;
  Tensor g = got.to(DType::F64), w = want.to(DType::F64);
  double err = amax(abs(g - w)).item<double>(), scale = amax(abs(w)).item<double>();
  double tol = want.dtype() == DType::BF16  ? 1e-2
               : want.dtype() == DType::F16 ? 1e-3
               : is_float(want.dtype())     ? 1e-6
                                            : 0;
  EXPECT_LE(err, tol * std::max(scale, 1.0)) << what << "\ngot\n" << got << "\nwant\n" << want;
}

TEST(CudaDistributed, CollectivesMatchTheDoubleResultForEachDType) {
  REQUIRE_DEVICES(2);  // NCCL takes a device per rank
  constexpr int n = 2;
  std::string dir = fresh_dir("cuda_collectives");
  std::vector<int> status = run_ranks(n, "collectives", dir, 60000, "CudaDistChild.DISABLED_Rank");
  EXPECT_EQ(status, std::vector<int>(n, 0));
  for (int r = 0; r < n; ++r)
    ASSERT_FALSE(fs::exists(fmt::format("{}/error.r{}.txt", dir, r)))
        << text_of(fmt::format("{}/error.r{}.txt", dir, r));
  auto got = [&](const std::string& name, int r, DType t = DType::F32) {
    Tensor x = load_npy(fmt::format("{}/{}.r{}.npy", dir, name, r));
    return t == DType::BF16 ? x.to(t) : x;
  };
  for (DType t : kDTypes) {
    std::string d(dtype_name(t));
    std::vector<Tensor> xs;
    for (int r = 0; r < n; ++r) xs.push_back(operand(r, t).to(DType::F64));
    Tensor all = stack(xs, 0);
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(fmt::format("{} rank {}", d, r));
      expect_equal(got("all_reduce_sum_" + d, r, t), sum(all, {0}).to(t), "sum");
      expect_equal(got("all_reduce_max_" + d, r, t), amax(all, {0}).to(t), "max");
      expect_equal(got("all_reduce_min_" + d, r, t), amin(all, {0}).to(t), "min");
      if (is_float(t)) expect_equal(got("all_reduce_mean_" + d, r, t), (sum(all, {0}) / double(n)).to(t), "mean");
      expect_equal(got("broadcast_" + d, r, t), operand(n - 1, t), "broadcast");
      expect_equal(got("all_gather_" + d, r, t), all.to(t), "all_gather");
      Tensor summed = sum(all.reshape({n, 12, 1}).narrow(1, 0, 3 * n), {0});
      expect_equal(got("reduce_scatter_" + d, r, t), summed.narrow(0, 3 * r, 3).to(t), "reduce_scatter");
    }
  }
  std::vector<Tensor> f32, f64;
  for (int r = 0; r < n; ++r) f32.push_back(operand(r, DType::F32)), f64.push_back(operand(r, DType::F64));
  Tensor sum32 = sum(stack(f32, 0), {0});
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    expect_equal(got("all_reduce_transposed", r), sum32.transpose(0, 1), "transposed");
    expect_equal(got("async_product", r), sum(stack(f64, 0), {0}) * amax(stack(f64, 0), {0}) * 2, "async");
    expect_equal(got("all_reduced", r), sum32, "all_reduced");
    // d/dw of sum_q (q + 1) * reduced_q: every rank's factor, summed.
    expect_equal(got("all_reduced_grad", r), full({3, 4}, 3.0), "all_reduced's gradient");
  }
  fs::remove_all(dir);
}

TEST(CudaDistributed, AShapeMismatchIsNamedOnEveryRank) {
  REQUIRE_DEVICES(2);  // NCCL takes a device per rank
  std::string dir = fresh_dir("cuda_mismatch");
  run_ranks(2, "mismatch", dir, 20000, "CudaDistChild.DISABLED_Rank");
  std::string e0 = text_of(dir + "/error.r0.txt"), e1 = text_of(dir + "/error.r1.txt");
  EXPECT_NE(e0.find("all_reduce"), std::string::npos) << e0;
  EXPECT_NE(e0.find("rank 0 gives f32[3,4] but rank 1 gives f32[3,5]"), std::string::npos) << e0;
  EXPECT_NE(e1.find("rank 1 gives f32[3,5] but rank 0 gives f32[3,4]"), std::string::npos) << e1;
  fs::remove_all(dir);
}

// A rank that hangs inside NCCL: every rank's watchdog aborts the communicator past the
// timeout, and the next collective throws, naming the collective and the rank.
TEST(CudaDistributed, ARankHungInNcclFailsTheOthersWithinTheTimeout) {
  REQUIRE_DEVICES(2);
  REQUIRE_HOST_CUDA();
  std::string dir = fresh_dir("cuda_hang");
  setenv("KILN_HOST_NCCL_HANG_RANK", "1", 1);
  run_ranks(2, "hang", dir, 2000, "CudaDistChild.DISABLED_Rank");
  unsetenv("KILN_HOST_NCCL_HANG_RANK");
  for (int r : {0, 1}) {
    std::string e = text_of(fmt::format("{}/error.r{}.txt", dir, r));
    EXPECT_NE(e.find(fmt::format("all_reduce (NCCL collective #0) on cuda:{} failed on rank {} of 2", r, r)),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("did not complete within the 2000 ms timeout"), std::string::npos) << e;
  }
  fs::remove_all(dir);
}

// Ranks that disagree at their first CUDA collective: the check runs before the communicator
// is made, so it names the disagreement; without the check, the communicator is not made
// within the timeout, and that is the error.
TEST(CudaDistributed, RanksThatDisagreeAtTheFirstCollectiveAreNamedNotHung) {
  REQUIRE_DEVICES(2);
  std::string dir = fresh_dir("cuda_first");
  run_ranks(2, "first_differs", dir, 5000, "CudaDistChild.DISABLED_Rank");
  std::string e0 = text_of(dir + "/error.r0.txt");
  EXPECT_NE(e0.find("rank 1 called another collective at this point"), std::string::npos) << e0;
  fs::remove_all(dir);
  dir = fresh_dir("cuda_first_unchecked");
  setenv("KILN_DIST_CHECK", "0", 1);
  run_ranks(2, "first_differs", dir, 2000, "CudaDistChild.DISABLED_Rank");
  unsetenv("KILN_DIST_CHECK");
  e0 = text_of(dir + "/error.r0.txt");
  EXPECT_NE(e0.find("rank 0 of 2: NCCL's communicator on cuda:0 was not made within the 2000 ms timeout"),
            std::string::npos)
      << e0;
  fs::remove_all(dir);
}

// NCCL's communicator takes device memory outside kiln's cache (8 MiB on the host NCCL): made
// at the first collective on devices full of cached blocks, it still comes, as kiln empties
// the cache before making it.
TEST(CudaDistributed, TheCommunicatorIsMadeOnADeviceFullOfCachedBlocks) {
  REQUIRE_DEVICES(2);
  REQUIRE_HOST_CUDA();  // a GPU's would be filled for real, beside the other rank's
  std::string dir = fresh_dir("cuda_full_device");
  std::vector<int> status = run_ranks(2, "full_device", dir, 20000, "CudaDistChild.DISABLED_Rank");
  EXPECT_EQ(status, std::vector<int>(2, 0));
  for (int r : {0, 1}) {
    ASSERT_FALSE(fs::exists(fmt::format("{}/error.r{}.txt", dir, r)))
        << text_of(fmt::format("{}/error.r{}.txt", dir, r));
    expect_equal(load_npy(fmt::format("{}/full_device.r{}.npy", dir, r)),
                 operand(0, DType::F32) + operand(1, DType::F32), "all_reduce");
  }
  fs::remove_all(dir);
}

TEST(CudaDistributed, DdpOnTwoDevicesMatchesOneCpuProcessOnTheWholeBatch) {
  REQUIRE_DEVICES(2);  // NCCL takes a device per rank
  std::string dir = fresh_dir("cuda_ddp");
  std::vector<int> status = run_ranks(2, "ddp", dir, 60000, "CudaDistChild.DISABLED_Rank");
  EXPECT_EQ(status, (std::vector<int>{0, 0}));
  for (int r = 0; r < 2; ++r)
    ASSERT_FALSE(fs::exists(fmt::format("{}/error.r{}.txt", dir, r)))
        << text_of(fmt::format("{}/error.r{}.txt", dir, r));
  std::vector<Tensor> want = train_mlp(cpu, nullptr);
  for (size_t i = 0; i < want.size(); ++i) {
    Tensor r0 = load_npy(fmt::format("{}/p{}.r0.npy", dir, i)), r1 = load_npy(fmt::format("{}/p{}.r1.npy", dir, i));
    double err = amax(abs(r0.to(DType::F64) - want[i].to(DType::F64))).item<double>();
    EXPECT_LE(err, 1e-5) << "parameter " << i;
    EXPECT_EQ(amax(abs(r0 - r1)).item<double>(), 0.0) << "parameter " << i << " differs between the ranks";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
