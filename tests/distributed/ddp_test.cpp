// tests/distributed/ddp_test.cpp -- DistributedDataParallel across 2 processes: each rank
// trains on half of every batch and ends with the parameters one process gets training on the
// whole batch (the MLP and the digits CNN; eager, with a compiled forward whose compiled
// backward fires the hooks, and with a traced whole step whose graph holds the reductions);
// the buckets start during backward, in order, each once, with every gradient in one of them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <kiln/kiln.h>

#include "examples/digits_net.h"
#include "tests/distributed/ranks.h"
#include "tests/unit/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::fresh_dir;
using test::run_ranks;
using test::text_of;

constexpr int kSteps = 4;
constexpr int64_t kBatch = 8;

struct Mlp : nn::Module {
  nn::Linear fc1{6, 16}, fc2{16, 16}, fc3{16, 3};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor operator()(const Tensor& x) { return fc3(relu(fc2(relu(fc1(x))))); }
};

enum class Mode { Eager, Compiled, TracedStep };
const std::map<std::string, Mode> kModes = {
    {"eager", Mode::Eager}, {"compiled", Mode::Compiled}, {"traced", Mode::TracedStep}};

// Small buckets, so even these models have several: the MLP's six parameters fall into four.
nn::DdpOptions small_buckets() { return {.bucket_bytes = 512, .first_bucket_bytes = 256}; }

// What a run of one model leaves: its parameters, and (with DDP) what the last backward did
// and the compiled step's graph.
struct Trained {
  std::vector<Tensor> params;
  std::vector<nn::DdpEvent> events;
  size_t buckets = 0;
  std::string graph;
};

// Trains `net` for kSteps SGD steps with momentum on rank `rank`'s share of a fixed batch
// (the whole batch when pg is null: the single-process reference). The first step accumulates
// the two halves of the share, the first under no_sync.
template <class Net> Trained train(Net& net, const Tensor& x, const Tensor& y, Mode mode, distributed::ProcessGroup* pg,
                                   nn::DdpOptions options,
                                   const std::function<Tensor(const Tensor&, const Tensor&)>& loss_of) {
  int rank = pg ? pg->rank() : 0, world = pg ? pg->world_size() : 1;
  int64_t share = kBatch / world;
  Tensor xs = x.narrow(0, rank * share, share).contiguous(), ys = y.narrow(0, rank * share, share).contiguous();
  std::optional<nn::DistributedDataParallel> ddp;
  if (pg) ddp.emplace(net, *pg, options);
  optim::SGD opt(net.parameters(), 0.1, {.momentum = 0.9});
  Trained out;
  auto forward = [&](const Tensor& in) { return net(in); };
  // Step 0, eagerly: the share's two halves, the first accumulated without reduction.
  {
    opt.zero_grad();
    int64_t h = share / 2;
    auto half = [&](int64_t at) { return loss_of(forward(xs.narrow(0, at, h)), ys.narrow(0, at, h)) * 0.5; };
    if (ddp) {
      auto guard = ddp->no_sync();
      half(0).backward();
    } else {
      half(0).backward();
    }
    half(h).backward();
    opt.step();
  }
  if (mode == Mode::TracedStep) {
    auto step = jit::trace(
        [&](Tensor a, Tensor b) {
          opt.zero_grad();
          Tensor l = loss_of(forward(a), b);
          l.backward();
          opt.step();
          return l;
        },
        {xs, ys}, "ddp_step");
    for (int s = 1; s < kSteps; ++s) step(xs, ys);
    std::ostringstream text;
    text << step.graph();
    out.graph = text.str();
  } else {
    std::optional<jit::Function> fast;
    if (mode == Mode::Compiled) fast.emplace(jit::trace([&](Tensor a) { return forward(a); }, {xs}, "ddp_forward"));
    for (int s = 1; s < kSteps; ++s) {
      opt.zero_grad();
      Tensor pred = fast ? (*fast)(xs) : forward(xs);
      loss_of(pred, ys).backward();
      opt.step();
    }
  }
  for (const Tensor& p : net.parameters()) out.params.push_back(p.detach().clone());
  if (ddp) out.events = ddp->events(), out.buckets = ddp->buckets().size();
  return out;
}

Tensor mse(const Tensor& p, const Tensor& t) { return mse_loss(p, t); }
Tensor xent(const Tensor& p, const Tensor& t) { return cross_entropy(p, t); }

// The data every rank (and the reference) makes alike; the models are made from a seed per
// rank, so only DDP's broadcast makes them rank 0's.
Trained run_mlp(Mode mode, distributed::ProcessGroup* pg) {
  manual_seed(100 + (pg ? pg->rank() : 0));
  Mlp net;
  manual_seed(7);
  Tensor x = randn({kBatch, 6}), y = randn({kBatch, 3});
  return train(net, x, y, mode, pg, small_buckets(), mse);
}

Trained run_cnn(Mode mode, distributed::ProcessGroup* pg) {
  manual_seed(200 + (pg ? pg->rank() : 0));
  examples::DigitsNet net;
  manual_seed(9);
  Tensor x = randn({kBatch, 1, 8, 8}), y = randint(0, 10, {kBatch});
  return train(net, x, y, mode, pg, {.bucket_bytes = 8192, .first_bucket_bytes = 2048}, xent);
}

std::string event_text(const std::vector<nn::DdpEvent>& events) {
  static const char* names[] = {"ready", "start", "end", "reduced"};
  std::string s;
  for (const nn::DdpEvent& e : events) s += fmt::format("{} {}\n", names[e.kind], e.index);
  return s;
}

// ---- the child: one rank ---------------------------------------------------------------

TEST(DdpChild, DISABLED_Rank) {
  const char* which = std::getenv("KILN_DIST_CASE");
  const char* dir = std::getenv("KILN_DIST_DIR");
  ASSERT_TRUE(which && dir) << "run by the Ddp tests, which set KILN_DIST_CASE and KILN_DIST_DIR";
  std::string c = which;  // "<model> <mode>"
  distributed::Options o = distributed::options_from_env();
  try {
    distributed::ProcessGroup pg(o);
    std::string model = c.substr(0, c.find(' ')), mode = c.substr(c.find(' ') + 1);
    Trained t = model == "mlp" ? run_mlp(kModes.at(mode), &pg) : run_cnn(kModes.at(mode), &pg);
    for (size_t i = 0; i < t.params.size(); ++i) save_npy(t.params[i], fmt::format("{}/p{}.r{}.npy", dir, i, o.rank));
    std::ofstream(fmt::format("{}/events.r{}.txt", dir, o.rank)) << t.buckets << "\n" << event_text(t.events);
    std::ofstream(fmt::format("{}/graph.r{}.txt", dir, o.rank)) << t.graph;
  } catch (const Error& e) {
    std::ofstream(fmt::format("{}/error.r{}.txt", dir, o.rank)) << e.what();
  }
}

// ---- the parent --------------------------------------------------------------------------

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.type().str(), want.type().str()) << what;
  double err = amax(abs(got.to(DType::F64) - want.to(DType::F64))).item<double>();
  double scale = std::max(1.0, amax(abs(want.to(DType::F64))).item<double>());
  EXPECT_LE(err, tol * scale) << what;
}

// The events of one synchronized backward: every gradient ready once; every bucket started
// once and in order, the first while backward still produced gradients (overlap); every bucket
// reduced once, after backward ended.
void expect_bucketed(const std::string& text, size_t params) {
  std::istringstream in(text);
  size_t buckets = 0;
  in >> buckets;
  ASSERT_GT(buckets, 1u) << "the test's bucket sizes should give several buckets";
  std::vector<std::pair<std::string, size_t>> ev;
  std::string kind;
  size_t index;
  while (in >> kind >> index) ev.emplace_back(kind, index);
  auto position = [&](const std::string& k, size_t i) {
    auto it = std::find(ev.begin(), ev.end(), std::make_pair(k, i));
    return it == ev.end() ? -1 : static_cast<int>(it - ev.begin());
  };
  auto count = [&](const std::string& k, size_t i) { return std::count(ev.begin(), ev.end(), std::make_pair(k, i)); };
  int last_ready = -1;
  for (size_t p = 0; p < params; ++p) {
    EXPECT_EQ(count("ready", p), 1) << "parameter " << p << "\n" << text;
    last_ready = std::max(last_ready, position("ready", p));
  }
  int end = position("end", 0);
  EXPECT_GT(end, last_ready) << text;
  for (size_t b = 0; b < buckets; ++b) {
    EXPECT_EQ(count("start", b), 1) << "bucket " << b << "\n" << text;
    EXPECT_EQ(count("reduced", b), 1) << "bucket " << b << "\n" << text;
    EXPECT_GT(position("reduced", b), end) << text;
    if (b > 0) {
      EXPECT_GT(position("start", b), position("start", b - 1)) << text;
    }
  }
  EXPECT_LT(position("start", 0), last_ready) << "the first bucket's all-reduce must start before backward "
                                                 "produced its last gradient\n"
                                              << text;
}

struct DdpCase {
  std::string model, mode;
};
void PrintTo(const DdpCase& c, std::ostream* os) { *os << c.model << ", " << c.mode; }  // not its bytes

class Ddp : public ::testing::TestWithParam<DdpCase> {};

TEST_P(Ddp, TwoRanksOnHalfBatchesMatchOneProcessOnTheWholeBatch) {
  const DdpCase& c = GetParam();
  std::string dir = fresh_dir("ddp_" + c.model + "_" + c.mode);
  std::vector<int> status = run_ranks(2, c.model + " " + c.mode, dir, 60000, "DdpChild.DISABLED_Rank");
  EXPECT_EQ(status, (std::vector<int>{0, 0}));
  for (int r = 0; r < 2; ++r)
    ASSERT_FALSE(fs::exists(fmt::format("{}/error.r{}.txt", dir, r)))
        << text_of(fmt::format("{}/error.r{}.txt", dir, r));
  // The reference: one process, the whole batch, eager.
  Trained want = c.model == "mlp" ? run_mlp(Mode::Eager, nullptr) : run_cnn(Mode::Eager, nullptr);
  double tol = c.mode == "eager" ? 2e-6 : 2e-5;  // fused kernels round differently
  for (size_t i = 0; i < want.params.size(); ++i) {
    Tensor r0 = load_npy(fmt::format("{}/p{}.r0.npy", dir, i)), r1 = load_npy(fmt::format("{}/p{}.r1.npy", dir, i));
    expect_close(r0, want.params[i], tol, fmt::format("parameter {} on rank 0", i));
    // The replicas stay identical: every rank applies the same reduced gradients.
    EXPECT_TRUE(amax(abs(r0 - r1)).item<double>() == 0.0) << "parameter " << i << " differs between the ranks";
  }
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    std::string events = text_of(fmt::format("{}/events.r{}.txt", dir, r));
    if (c.mode == "traced") {
      // The hooks ran while tracing; the compiled step holds one all_reduce per bucket.
      std::string graph = text_of(fmt::format("{}/graph.r{}.txt", dir, r));
      size_t buckets = std::stoul(events), found = 0;
      for (size_t at = graph.find("= all_reduce "); at != std::string::npos; at = graph.find("= all_reduce ", at + 1))
        ++found;
      EXPECT_EQ(found, buckets) << graph;
    } else {
      expect_bucketed(events, want.params.size());
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, Ddp,
                         ::testing::Values(DdpCase{"mlp", "eager"}, DdpCase{"mlp", "compiled"},
                                           DdpCase{"mlp", "traced"}, DdpCase{"cnn", "eager"},
                                           DdpCase{"cnn", "compiled"}, DdpCase{"cnn", "traced"}),
                         [](const auto& info) { return info.param.model + "_" + info.param.mode; });

// In one process: the buckets, in reverse registration order, split at the caps and by dtype.
TEST(DdpBuckets, FollowReverseRegistrationOrderAndTheCaps) {
  distributed::Options o;
  o.rank = 0, o.world_size = 1, o.master_port = test::free_port();
  distributed::ProcessGroup pg(o);
  Mlp net;  // parameters: fc1.w (384 B), fc1.b, fc2.w (1024 B), fc2.b, fc3.w (192 B), fc3.b
  nn::DistributedDataParallel ddp(net, pg, small_buckets());
  EXPECT_EQ(ddp.buckets(), (std::vector<std::vector<size_t>>{{5, 4}, {3}, {2}, {1, 0}}));
  nn::DistributedDataParallel one(net, pg);
  EXPECT_EQ(one.buckets(), (std::vector<std::vector<size_t>>{{5, 4, 3, 2, 1, 0}}));
  test::expect_error([&] { ddp(zeros({2, 6})); }, {"UnaryModule"});
}

// A backward cut short by an error leaves its reductions unfinished: the next backward says so
// (instead of mixing two steps' gradients), and the one after works.
TEST(DdpBuckets, ABackwardCutShortIsNamedByTheNextOne) {
  distributed::Options o;
  o.rank = 0, o.world_size = 1, o.master_port = test::free_port();
  distributed::ProcessGroup pg(o);
  Mlp net;
  nn::DistributedDataParallel ddp(net, pg, small_buckets());
  bool fail = true;
  autograd::register_post_accumulate_grad_hook(net.fc1.weight, [&](const Tensor&) {
    if (fail) throw Error("a hook failed");
  });
  Tensor x = randn({4, 6});
  test::expect_error([&] { net(x).sum().backward(); }, {"a hook failed"});
  fail = false;
  test::expect_error([&] { net(x).sum().backward(); }, {"DistributedDataParallel", "cut short"});
  net.zero_grad();
  Tensor want = autograd::grad({net(x).sum()}, {net.fc1.weight})[0];  // grad() fires no hooks
  net(x).sum().backward();
  EXPECT_EQ(ddp.events().back().kind, nn::DdpEvent::BucketReduced);
  test::expect_close(net.fc1.weight.grad(), want.to_vector<double>());
}

}  // namespace
}  // namespace kiln
