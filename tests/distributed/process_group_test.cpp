// tests/distributed/process_group_test.cpp -- collectives across 2 and 4 local processes
// (loopback, oversubscribed on 2 cores) against the single-process result, for each dtype; a
// shape mismatch, a dead rank, a port in use and a bad address give their errors.
//
// Each rank is this binary run again with RANK, WORLD_SIZE, MASTER_PORT and KILN_DIST_CASE /
// KILN_DIST_DIR set, running the disabled test DistChild.DISABLED_Rank: it writes what it got
// (.npy, or the error's text) into the folder, and the parent checks it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "distributed/process_group.h"
#include "distributed/tcp_store.h"
#include "runtime/api.h"
#include "tests/distributed/ranks.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using distributed::ReduceOp;
using test::free_port;
using test::fresh_dir;
using test::run_ranks;
using test::text_of;

constexpr DType kDTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8};

// Rank r's operand: distinct per rank, small enough for u8 sums over 4 ranks.
Tensor operand(int r, DType t) { return (arange(12).reshape({3, 4}) * (r + 1) + r).to(t); }

// ---- the child: one rank ---------------------------------------------------------------

void collectives(distributed::ProcessGroup& pg, const std::string& dir) {
  int r = pg.rank(), n = pg.world_size();
  auto out = [&](const std::string& name, const Tensor& t) { save_npy(t, fmt::format("{}/{}.r{}.npy", dir, name, r)); };
  for (DType t : kDTypes) {
    std::string d(dtype_name(t));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean}) {
      if (op == ReduceOp::Mean && !is_float(t)) continue;
      Tensor x = operand(r, t);
      distributed::all_reduce(pg, x, op);
      out(fmt::format("all_reduce_{}_{}", distributed::reduce_op_name(op), d), x);
    }
    Tensor b = operand(r, t);
    distributed::broadcast(pg, b, n - 1);
    out("broadcast_" + d, b);
    out("all_gather_" + d, distributed::all_gather(pg, operand(r, t)));
    Tensor rows = operand(r, t).reshape({12, 1}).narrow(0, 0, 3 * n);  // 3 rows per rank
    out("reduce_scatter_" + d, distributed::reduce_scatter(pg, rows, ReduceOp::Sum));
  }
  // A non-contiguous operand, and two operations in flight at once.
  Tensor tr = operand(r, DType::F32).transpose(0, 1);
  distributed::all_reduce(pg, tr);
  out("all_reduce_transposed", tr);
  Tensor a = operand(r, DType::F64), c = operand(r, DType::F64) * 2;
  distributed::Work wa = distributed::all_reduce_async(pg, a), wc = distributed::all_reduce_async(pg, c, ReduceOp::Max);
  wa.wait();
  wc.wait();
  EXPECT_TRUE(wa.completed() && wc.completed());
  out("async_sum", a);
  out("async_max", c);
  distributed::barrier(pg);
}

TEST(DistChild, DISABLED_Rank) {
  const char* which = std::getenv("KILN_DIST_CASE");
  const char* dir = std::getenv("KILN_DIST_DIR");
  ASSERT_TRUE(which && dir) << "run by the Distributed tests, which set KILN_DIST_CASE and KILN_DIST_DIR";
  std::string c = which;
  distributed::Options o = distributed::options_from_env();
  auto error_file = [&] { return fmt::format("{}/error.r{}.txt", dir, o.rank); };
  try {
    distributed::ProcessGroup pg(o);
    if (c == "collectives") collectives(pg, dir);
    if (c == "sum") {
      Tensor x = operand(pg.rank(), DType::F32);
      distributed::all_reduce(pg, x);
      save_npy(x, fmt::format("{}/sum.r{}.npy", dir, pg.rank()));
    }
    if (c == "mismatch") {
      Tensor x = zeros({3, pg.rank() == 1 ? 5 : 4});
      distributed::all_reduce(pg, x);
    }
    if (c == "late") {  // alive but never there in time: the others time out
      if (pg.rank() == 1) std::this_thread::sleep_for(o.timeout + std::chrono::milliseconds(1500));
      Tensor x = zeros({4});
      distributed::all_reduce(pg, x);
    }
    if (c == "dies") {
      if (pg.rank() == 1) ::_exit(0);  // as a killed rank: no goodbye
      Tensor x = zeros({4});
      distributed::all_reduce(pg, x);
    }
  } catch (const Error& e) {
    std::ofstream(error_file()) << e.what();
  }
}

// ---- the parent ------------------------------------------------------------------------

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.type().str(), want.type().str()) << what;
  Tensor g = got.to(DType::F64), w = want.to(DType::F64);
  double err = amax(abs(g - w)).item<double>(), scale = amax(abs(w)).item<double>();
  EXPECT_LE(err, is_float(want.dtype()) ? 1e-6 * std::max(scale, 1.0) : 0.0) << what << "\ngot\n"
                                                                             << got << "\nwant\n"
                                                                             << want;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchTheSingleProcessResultForEachDType) {
  int n = GetParam();
  std::string dir = fresh_dir(fmt::format("collectives{}", n));
  std::vector<int> status = run_ranks(n, "collectives", dir, 60000);
  EXPECT_EQ(status, std::vector<int>(static_cast<size_t>(n), 0));
  for (int r = 0; r < n; ++r)
    ASSERT_FALSE(fs::exists(fmt::format("{}/error.r{}.txt", dir, r)))
        << text_of(fmt::format("{}/error.r{}.txt", dir, r));
  auto got = [&](const std::string& name, int r) { return load_npy(fmt::format("{}/{}.r{}.npy", dir, name, r)); };
  for (DType t : kDTypes) {
    std::string d(dtype_name(t));
    std::vector<Tensor> xs;
    for (int r = 0; r < n; ++r) xs.push_back(operand(r, t).to(DType::F64));
    Tensor all = stack(xs, 0);
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(fmt::format("{} rank {}", d, r));
      expect_equal(got("all_reduce_sum_" + d, r), sum(all, {0}).to(t), "sum");
      expect_equal(got("all_reduce_max_" + d, r), amax(all, {0}).to(t), "max");
      expect_equal(got("all_reduce_min_" + d, r), amin(all, {0}).to(t), "min");
      if (is_float(t)) expect_equal(got("all_reduce_mean_" + d, r), (sum(all, {0}) / double(n)).to(t), "mean");
      expect_equal(got("broadcast_" + d, r), operand(n - 1, t), "broadcast");
      expect_equal(got("all_gather_" + d, r), all.to(t), "all_gather");
      Tensor summed = sum(all.reshape({n, 12, 1}).narrow(1, 0, 3 * n), {0});
      expect_equal(got("reduce_scatter_" + d, r), summed.narrow(0, 3 * r, 3).to(t), "reduce_scatter");
    }
  }
  std::vector<Tensor> fs32, fs64;
  for (int r = 0; r < n; ++r)
    fs32.push_back(operand(r, DType::F32).transpose(0, 1)), fs64.push_back(operand(r, DType::F64));
  for (int r = 0; r < n; ++r) {
    expect_equal(got("all_reduce_transposed", r), sum(stack(fs32, 0), {0}), "transposed");
    expect_equal(got("async_sum", r), sum(stack(fs64, 0), {0}), "async sum");
    expect_equal(got("async_max", r), amax(stack(fs64, 0), {0}) * 2, "async max");
  }
  fs::remove_all(dir);
}
INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& i) { return fmt::format("world{}", i.param); });

// As on several machines: MASTER_ADDR is a name or address that is not a loopback one, so the
// store listens on every interface and each rank is reached at its network interface's address
// (this machine's own name may map to a loopback address, as Debian's /etc/hosts does).
TEST(Distributed, AJobAddressedThroughTheNetworkForms) {
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  std::string dir = fresh_dir("network");
  EXPECT_EQ(run_ranks(2, "sum", dir, 20000, "DistChild.DISABLED_Rank", host), (std::vector<int>{0, 0}));
  for (int r = 0; r < 2; ++r) {
    std::string error = fmt::format("{}/error.r{}.txt", dir, r);
    ASSERT_FALSE(fs::exists(error)) << "MASTER_ADDR=" << host << ": " << text_of(error);
    expect_equal(load_npy(fmt::format("{}/sum.r{}.npy", dir, r)), operand(0, DType::F32) + operand(1, DType::F32),
                 "sum");
  }
  fs::remove_all(dir);
}

TEST(Distributed, AShapeMismatchIsNamedOnEveryRank) {
  std::string dir = fresh_dir("mismatch");
  run_ranks(2, "mismatch", dir, 20000);
  std::string e0 = text_of(dir + "/error.r0.txt"), e1 = text_of(dir + "/error.r1.txt");
  EXPECT_NE(e0.find("all_reduce"), std::string::npos) << e0;
  EXPECT_NE(e0.find("rank 0 gives f32[3,4] but rank 1 gives f32[3,5]"), std::string::npos) << e0;
  EXPECT_NE(e1.find("rank 1 gives f32[3,5] but rank 0 gives f32[3,4]"), std::string::npos) << e1;
  fs::remove_all(dir);
}

TEST(Distributed, ADeadRankMakesTheOthersFailWithinTheTimeout) {
  std::string dir = fresh_dir("dies");
  auto t0 = std::chrono::steady_clock::now();
  run_ranks(2, "dies", dir, 3000);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string e0 = text_of(dir + "/error.r0.txt");
  EXPECT_NE(e0.find("all_reduce"), std::string::npos) << e0;
  EXPECT_NE(e0.find("rank 1 did not arrive"), std::string::npos) << e0;
  EXPECT_LT(s, 30.0) << "a dead rank must not hang the others";
  fs::remove_all(dir);
}

TEST(Distributed, ARankThatNeverArrivesMakesTheOthersTimeOut) {
  std::string dir = fresh_dir("late");
  auto t0 = std::chrono::steady_clock::now();
  run_ranks(2, "late", dir, 1500);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string e0 = text_of(dir + "/error.r0.txt");
  EXPECT_NE(e0.find("all_reduce (collective #1) failed on rank 0 of 2 within the 1500 ms timeout"), std::string::npos)
      << e0;
  EXPECT_NE(e0.find("rank 1 did not arrive"), std::string::npos) << e0;
  EXPECT_LT(s, 20.0);
  fs::remove_all(dir);
}

// A collective that breaks with every rank present names the one that left from the store:
// the server marks a client that said its rank, once its connection ends, and no other.
TEST(Distributed, TheStoreMarksARankWhoseConnectionEndedAsGone) {
  using distributed::TcpStore;
  int port = free_port();
  auto timeout = std::chrono::milliseconds(5000);
  TcpStore server("127.0.0.1", port, /*serve=*/true, timeout);
  server.identify(0);
  auto client = std::make_unique<TcpStore>("127.0.0.1", port, false, timeout);
  client->identify(1);
  TcpStore anonymous("127.0.0.1", port, false, timeout);
  std::vector<char> v;
  client->set("x", {'1'});
  EXPECT_FALSE(server.try_get("gone/1", &v));
  client.reset();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!server.try_get("gone/1", &v) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(server.try_get("gone/1", &v)) << "the closed connection of rank 1 is not marked";
  EXPECT_FALSE(server.try_get("gone/0", &v));
  EXPECT_TRUE(server.try_get("x", &v));
}

TEST(Distributed, APortInUseAndABadAddressAreClearErrors) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  distributed::Options o;
  o.rank = 0, o.world_size = 1, o.master_port = ntohs(a.sin_port), o.timeout = std::chrono::milliseconds(2000);
  test::expect_error([&] { distributed::ProcessGroup pg(o); }, {"cannot serve the rendezvous", "MASTER_PORT"});
  ::close(fd);
  o.master_addr = "no-such-host.invalid";
  test::expect_error([&] { distributed::ProcessGroup pg(o); }, {"cannot resolve", "no-such-host.invalid"});
  o.master_addr = "127.0.0.1";
  o.rank = 2;
  test::expect_error([&] { distributed::ProcessGroup pg(o); }, {"rank 2 is outside 0..0"});
}

TEST(Distributed, OneRankIsAGroupToo) {
  distributed::Options o;
  o.rank = 0, o.world_size = 1, o.master_port = free_port();
  distributed::ProcessGroup pg(o);
  Tensor x = operand(0, DType::F32);
  distributed::all_reduce(pg, x, ReduceOp::Mean);
  expect_equal(x, operand(0, DType::F32), "one rank's mean");
  EXPECT_EQ(distributed::all_gather(pg, x).shape(), (Dims{1, 3, 4}));
  Tensor h = zeros({2}, f16);
  test::expect_error([&] { distributed::all_reduce(pg, h); }, {"all_reduce", "f16", "not supported"});
  Tensor i = zeros({2}, i64);
  test::expect_error([&] { distributed::all_reduce(pg, i, ReduceOp::Mean); }, {"mean", "integer"});
}

}  // namespace
}  // namespace kiln
