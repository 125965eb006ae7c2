// distributed/process_group.cpp -- the process group over Gloo (TCP): rendezvous through the
// TcpStore, every collective on one worker thread in issue order, its errors turned into
// kiln::Errors that name the collective and the ranks that did not arrive. CUDA tensors go to
// NCCL (distributed/nccl.h), which joins through the same store and runs the same check.
#include "distributed/process_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "distributed/nccl.h"
#include "distributed/tcp_store.h"
#include "distributed/work.h"
#include "runtime/api.h"
#include "runtime/autograd_meta.h"
#include "runtime/check.h"
#include "runtime/collective.h"

namespace kiln::distributed {

void Work::wait() const {
  if (state_->event) {  // on a CUDA stream: the caller's stream waits for it
    state_->event->block(cuda::current_stream(state_->device));
    return;
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->failed) throw Error(state_->error);
}

bool Work::completed() const {
  if (state_->event) return state_->event->query();
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

namespace {

int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    KILN_CHECK(!required, "distributed: {} is not set (launch with kiln-run or set RANK, WORLD_SIZE, MASTER_ADDR "
               "and MASTER_PORT)", name);
    return fallback;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  KILN_CHECK(*end == '\0' && x >= 0 && x <= INT32_MAX, "distributed: {}='{}' is not a non-negative integer", name, v);
  return static_cast<int>(x);
}

// The address the other ranks reach this one at: the interface that routes toward MASTER_ADDR,
// or when that is a loopback address (rank 0's machine, whose own name Debian maps to
// 127.0.1.1) the first non-loopback IPv4 interface that is up. KILN_DIST_HOSTNAME overrides.
std::string address_for_peers(const std::string& master, int port) {
  std::string found;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &res) == 0) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    socklen_t len = sizeof a;
    char buf[INET_ADDRSTRLEN] = {};
    // A datagram socket's connect only picks the route; nothing is sent.
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf))
      found = buf;
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(res);
  }
  if (!found.empty() && !is_loopback(found)) return found;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i && (found.empty() || is_loopback(found)); i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
        continue;
      char buf[INET_ADDRSTRLEN] = {};
      if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf)) found = buf;
    }
    ::freeifaddrs(ifs);
  }
  KILN_CHECK(!found.empty() && !is_loopback(found), "distributed: this machine has no network address the other "
             "ranks could reach it at (MASTER_ADDR {} is not a loopback address); set KILN_DIST_HOSTNAME", master);
  return found;
}

// Gloo's store interface over ours.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(TcpStore& s, std::chrono::milliseconds timeout) : s_(s), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { s_.set("gloo/" + key, data); }
  std::vector<char> get(const std::string& key) override { return s_.get("gloo/" + key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& k : keys) s_.get("gloo/" + k, timeout);
  }

 private:
  TcpStore& s_;
  std::chrono::milliseconds timeout_;
};

// The element types Gloo reduces, by kiln dtype.
template <class F> auto by_dtype(DType t, const char* what, F f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::U8: return f(uint8_t{});
    default:
      throw Error(fmt::format("distributed: {}: dtype {} is not supported by the Gloo backend (f32, f64, i32, i64, u8)",
                              what, dtype_name(t)));
  }
}

template <class T> gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);  // Gloo's untyped form of each
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return static_cast<Fn>(&gloo::sum<T>);
    case ReduceOp::Max: return static_cast<Fn>(&gloo::max<T>);
    case ReduceOp::Min: return static_cast<Fn>(&gloo::min<T>);
  }
  return static_cast<Fn>(&gloo::sum<T>);
}

class GlooBackend final : public Backend {
 public:
  explicit GlooBackend(const Options& o) : o_(o) {
    KILN_CHECK(o.world_size >= 1, "distributed: world_size must be at least 1, got {}", o.world_size);
    KILN_CHECK(o.rank >= 0 && o.rank < o.world_size, "distributed: rank {} is outside 0..{}", o.rank, o.world_size - 1);
    KILN_CHECK(o.timeout.count() > 0, "distributed: the timeout must be positive");
    // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would kill this process
    // with SIGPIPE instead of failing the collective with an error naming it. Ignored, unless
    // the program handles SIGPIPE itself.
    struct sigaction old_action {};
    if (::sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
    store_ = std::make_unique<TcpStore>(o.master_addr, o.master_port, o.rank == 0, o.timeout);
    store_->identify(o.rank);
    gloo::transport::tcp::attr attr;
    attr.hostname = !o.hostname.empty()             ? o.hostname
                    : is_loopback(o.master_addr) ? "127.0.0.1"
                                                 : address_for_peers(o.master_addr, o.master_port);
    try {
      auto dev = gloo::transport::tcp::CreateDevice(attr);
      ctx_ = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
      ctx_->setTimeout(o.timeout);
      StoreAdapter adapter(*store_, o.timeout);
      ctx_->connectFullMesh(adapter, dev);
      // Every rank has connected before any leaves the rendezvous (rank 0's store must outlive
      // the others' reads of it).
      gloo::BarrierOptions b(ctx_);
      b.setTag(next_tag_++);
      gloo::barrier(b);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(fmt::format("distributed: rank {} of {} could not connect to the others through {}:{} within {} ms: {}",
                              o.rank, o.world_size, o.master_addr, o.master_port, o.timeout.count(), e.what()));
    }
    worker_ = std::thread([this] { run(); });
  }

  ~GlooBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  int rank() const override { return o_.rank; }
  int world_size() const override { return o_.world_size; }
  Device device() const override { return cpu; }
  const Options& options() const { return o_; }
  TcpStore& store() { return *store_; }

  // The per-collective check alone (Options::check), for another engine's collective: in this
  // group's order, naming a mismatch or a missing rank as a Gloo collective would.
  void check_only(const char* name, const Tensor& t) {
    enqueue(name, t, [](uint32_t) {}).wait();
  }

  Work all_reduce(Tensor t, ReduceOp op) override {
    return enqueue("all_reduce", t, [this, t, op](uint32_t tag) mutable {
      reduce_in_place(t, op, tag, "all_reduce");
      if (op == ReduceOp::Mean) t.div_(static_cast<double>(o_.world_size));
    });
  }

  Work broadcast(Tensor t, int root) override {
    return enqueue("broadcast", t, [this, t, root](uint32_t tag) {
      by_dtype(t.dtype(), "broadcast", [&](auto zero) {
        using T = decltype(zero);
        gloo::BroadcastOptions opts(ctx_);
        opts.setOutput(static_cast<T*>(t.data_ptr()), static_cast<size_t>(t.numel()));
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(o_.timeout);
        gloo::broadcast(opts);
        return 0;
      });
    });
  }

  Work all_gather(Tensor out, Tensor in) override {
    return enqueue("all_gather", in, [this, out, in](uint32_t tag) {
      by_dtype(in.dtype(), "all_gather", [&](auto zero) {
        using T = decltype(zero);
        gloo::AllgatherOptions opts(ctx_);
        opts.setInput(static_cast<T*>(in.data_ptr()), static_cast<size_t>(in.numel()));
        opts.setOutput(static_cast<T*>(out.data_ptr()), static_cast<size_t>(out.numel()));
        opts.setTag(tag);
        opts.setTimeout(o_.timeout);
        gloo::allgather(opts);
        return 0;
      });
    });
  }

  // Gloo's reduce-scatter is an older, float-only algorithm class; this is its all-reduce and
  // this rank's block (twice the traffic of a true reduce-scatter; fine for the CPU engine).
  Work reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    return enqueue("reduce_scatter", in, [this, out, in, op](uint32_t tag) mutable {
      Tensor all = in.clone();
      reduce_in_place(all, op, tag, "reduce_scatter");
      int64_t block = all.shape()[0] / o_.world_size;
      Tensor mine = all.narrow(0, o_.rank * block, block);
      if (op == ReduceOp::Mean) mine = mine / static_cast<double>(o_.world_size);
      out.copy_(mine);
    });
  }

  Work barrier() override {
    return enqueue("barrier", Tensor(), [this](uint32_t tag) {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(tag);
      opts.setTimeout(o_.timeout);
      gloo::barrier(opts);
    });
  }

 private:
  struct Op {
    const char* name;
    Tensor t;  // the operand checked across ranks (undefined for a barrier)
    std::function<void(uint32_t)> run;
    std::shared_ptr<Work::State> state;
  };

  // Gloo's all-reduce over t's elements, in place (a mean is its sum here).
  void reduce_in_place(const Tensor& t, ReduceOp op, uint32_t tag, const char* what) {
    by_dtype(t.dtype(), what, [&](auto zero) {
      using T = decltype(zero);
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(static_cast<T*>(t.data_ptr()), static_cast<size_t>(t.numel()));
      opts.setReduceFunction(reduce_fn<T>(op));
      opts.setTag(tag);
      opts.setTimeout(o_.timeout);
      gloo::allreduce(opts);
      return 0;
    });
  }

  Work enqueue(const char* name, Tensor t, std::function<void(uint32_t)> run) {
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({name, std::move(t), std::move(run), state});
    }
    cv_.notify_all();
    return Work(state);
  }

  void run() {
    GradModeGuard no_grad(false);  // collectives write gradients and weights; nothing is taped
    for (;;) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      uint64_t seq = ++seq_;
      std::string error;
      bool failed = true;
      try {
        if (o_.check) check(op, seq);
        op.run(next_tag_++);
        failed = false;
      } catch (const Error& e) {
        error = e.what();
      } catch (const std::exception& e) {
        error = failure(op.name, seq, e.what());
      } catch (...) {
        error = failure(op.name, seq, "an unknown exception");
      }
      op.state->finish(failed, std::move(error));
    }
  }

  // The cheap per-collective check: each rank marks its arrival in the store, then the ranks
  // exchange (kind, dtype, shape) and compare.
  static constexpr int kRecord = 11;  // kind, dtype, rank of the shape, then up to 8 sizes
  void check(const Op& op, uint64_t seq) {
    std::vector<char> mark(sizeof seq);
    std::memcpy(mark.data(), &seq, sizeof seq);
    store_->set(fmt::format("arrived/{}", o_.rank), mark);
    int64_t mine[kRecord] = {};
    mine[0] = static_cast<int64_t>(std::hash<std::string_view>{}(op.name) & 0xffffff);
    if (op.t.defined()) {
      mine[1] = static_cast<int64_t>(op.t.dtype()) + 1;
      mine[2] = op.t.dim();
      for (int64_t d = 0; d < op.t.dim() && d < kRecord - 3; ++d) mine[3 + d] = op.t.shape()[d];
    }
    std::vector<int64_t> all(static_cast<size_t>(kRecord * o_.world_size));
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(mine, kRecord);
    opts.setOutput(all.data(), all.size());
    opts.setTag(next_tag_++);
    opts.setTimeout(o_.timeout);
    gloo::allgather(opts);
    auto describe = [&](const int64_t* r) {
      if (r[1] == 0) return std::string("no tensor (a barrier)");
      Dims shape;
      for (int64_t d = 0; d < std::min<int64_t>(r[2], kRecord - 3); ++d) shape.push_back(r[3 + d]);
      return fmt::format("{}{}", dtype_name(static_cast<DType>(r[1] - 1)), shape_str(shape));
    };
    for (int r = 0; r < o_.world_size; ++r) {
      const int64_t* theirs = all.data() + r * kRecord;
      if (std::equal(mine, mine + kRecord, theirs)) continue;
      if (theirs[0] != mine[0])
        throw Error(fmt::format("distributed: {} (collective #{}) on rank {}: rank {} called another collective at "
                                "this point; every rank must issue the same collectives in the same order",
                                op.name, seq, o_.rank, r));
      throw Error(fmt::format("distributed: {} (collective #{}): rank {} gives {} but rank {} gives {}; every rank "
                              "must pass the same dtype and shape (Options::check)",
                              op.name, seq, o_.rank, describe(mine), r, describe(theirs)));
    }
  }

  // A collective failed in the engine (a timeout, a closed connection): which ranks did not
  // arrive at it, from their marks in the store; or, when all did, which left the job since.
  std::string failure(const char* name, uint64_t seq, const std::string& why) {
    std::string ranks;
    if (o_.check) {
      try {
        std::vector<int> missing;
        for (int r = 0; r < o_.world_size; ++r) {
          std::vector<char> v;
          uint64_t s = 0;
          if (store_->try_get(fmt::format("arrived/{}", r), &v) && v.size() == sizeof s) std::memcpy(&s, v.data(), sizeof s);
          if (s < seq) missing.push_back(r);
        }
        std::vector<int> gone = missing.empty() ? gone_ranks() : std::vector<int>{};
        if (!missing.empty())
          ranks = fmt::format(": rank {} did not arrive (it died, or never called {})", fmt::join(missing, ", "), name);
        else if (!gone.empty())
          ranks = fmt::format(": rank {} arrived at it, then left the job (it died, or its host became unreachable)",
                              fmt::join(gone, ", "));
        else
          ranks = " (every rank arrived at it, and none has left the job)";
      } catch (const Error&) {
        ranks = ": rank 0 (which serves the rendezvous store) is unreachable: it died, or its host became unreachable";
      }
    }
    return fmt::format("distributed: {} (collective #{}) failed on rank {} of {} within the {} ms timeout{}; Gloo: {}",
                       name, seq, o_.rank, o_.world_size, o_.timeout.count(), ranks, why);
  }

  // The ranks whose connections to the store ended (TcpStore::identify). A process that died
  // is seen at once; a host that vanished, when keepalive gives up on it (about 4 s after that
  // rank's last request): so this waits up to 5 s (or the timeout, if shorter) for one.
  std::vector<int> gone_ranks() {
    auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(o_.timeout, std::chrono::seconds(5));
    for (;;) {
      std::vector<int> gone;
      std::vector<char> v;
      for (int r = 0; r < o_.world_size; ++r)
        if (r != o_.rank && store_->try_get(fmt::format("gone/{}", r), &v)) gone.push_back(r);
      if (!gone.empty() || std::chrono::steady_clock::now() >= deadline) return gone;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  Options o_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stopping_ = false;
  uint32_t next_tag_ = 1;  // the worker's (and the constructor's) alone
  uint64_t seq_ = 0;
  std::thread worker_;
};

Tensor contiguous_operand(const Tensor& t, const char* what) {
  KILN_CHECK(t.defined(), "distributed: {}: the tensor is undefined", what);
  return t.is_contiguous() ? t : t.contiguous();
}

}  // namespace

Options options_from_env() {
  Options o;
  o.rank = env_int("RANK", -1, true);
  o.world_size = env_int("WORLD_SIZE", -1, true);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", o.master_port, false);
  o.timeout = std::chrono::milliseconds(env_int("KILN_DIST_TIMEOUT_MS", static_cast<int>(o.timeout.count()), false));
  if (const char* h = std::getenv("KILN_DIST_HOSTNAME"); h && *h) o.hostname = h;
  o.check = env_int("KILN_DIST_CHECK", 1, false) != 0;
  return o;
}

// A group's engines: Gloo, which also serves the store and runs the per-collective check,
// and NCCL's communicators by CUDA device, made on first use (the k-th one made takes the
// store's key "nccl/k", which every rank reaches in the same order).
struct GroupEngines {
  std::unique_ptr<GlooBackend> gloo;
  std::mutex mu;
  std::map<int, std::unique_ptr<Backend>> cuda;
  int made = 0;

  Backend& of(Device d) {
    if (d.is_cpu()) return *gloo;
    KILN_CHECK(d.is_cuda(), "distributed: tensors on {} have no collective engine (the CPU's is Gloo, CUDA's NCCL)",
               d.str());
    std::lock_guard<std::mutex> lock(mu);
    std::unique_ptr<Backend>& b = cuda[d.index];
    if (!b) {
      std::function<void(const char*, const Tensor&)> check;
      if (gloo->options().check)
        check = [g = gloo.get()](const char* name, const Tensor& t) { g->check_only(name, t); };
      b = make_nccl_backend(gloo->store(), gloo->options(), d.index, fmt::format("nccl/{}", made++), check);
    }
    return *b;
  }
  ~GroupEngines() {
    cuda.clear();  // before Gloo: they join and check through it
  }
};

namespace {

// The live groups by id, for the all_reduce op (which names its group by number).
std::mutex g_groups_mu;
std::map<int64_t, GroupEngines*> g_groups;
int64_t g_next_group = 1;

ReduceOp reduce_op_of(Combine c) {
  switch (c) {
    case Combine::Max: return ReduceOp::Max;
    case Combine::Min: return ReduceOp::Min;
    default: return ReduceOp::Sum;
  }
}

void run_all_reduce_op(int64_t group, Combine reduce, const Tensor& data) {
  GroupEngines* g = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_groups_mu);
    auto it = g_groups.find(group);
    KILN_CHECK(it != g_groups.end(), "all_reduce: process group {} does not exist in this process (it was "
               "destroyed, or the graph was traced in another process)", group);
    g = it->second;
  }
  g->of(data.device()).all_reduce(data, reduce_op_of(reduce)).wait();
}

int64_t register_group(GroupEngines* g) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  if (g_groups.empty()) set_all_reduce_engine(run_all_reduce_op);
  int64_t id = g_next_group++;
  g_groups[id] = g;
  return id;
}

void unregister_group(int64_t id) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  g_groups.erase(id);
}

std::unique_ptr<GroupEngines> make_engines(const Options& options) {
  auto e = std::make_unique<GroupEngines>();
  e->gloo = std::make_unique<GlooBackend>(options);
  return e;
}

}  // namespace

ProcessGroup::ProcessGroup(const Options& options)
    : engines_(make_engines(options)), id_(register_group(engines_.get())) {}
ProcessGroup::~ProcessGroup() {
  if (engines_) unregister_group(id_);
}
ProcessGroup::ProcessGroup(ProcessGroup&& o) noexcept : engines_(std::move(o.engines_)), id_(std::exchange(o.id_, 0)) {}
ProcessGroup& ProcessGroup::operator=(ProcessGroup&& o) noexcept {
  if (this != &o) {
    if (engines_) unregister_group(id_);
    engines_ = std::move(o.engines_);
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

Tensor all_reduced(ProcessGroup& pg, const Tensor& t, ReduceOp op) {
  KILN_CHECK(t.defined(), "distributed: all_reduced: the tensor is undefined");
  KILN_CHECK(op != ReduceOp::Mean || is_float(t.dtype()), "distributed: all_reduced: mean of {} (an integer "
             "dtype); use sum", t.type().str());
  Combine c = op == ReduceOp::Max ? Combine::Max : op == ReduceOp::Min ? Combine::Min : Combine::Sum;
  Tensor r = all_reduce_op(t, pg.id(), c);
  return op == ReduceOp::Mean ? r * (1.0 / pg.world_size()) : r;
}
int ProcessGroup::rank() const { return engines_->gloo->rank(); }
int ProcessGroup::world_size() const { return engines_->gloo->world_size(); }
Backend& ProcessGroup::backend() const { return *engines_->gloo; }
Backend& ProcessGroup::backend(Device device) { return engines_->of(device); }

Work all_reduce_async(ProcessGroup& pg, Tensor& t, ReduceOp op) {
  Tensor c = contiguous_operand(t, "all_reduce");
  KILN_CHECK(op != ReduceOp::Mean || is_float(t.dtype()), "distributed: all_reduce: mean of {} (an integer dtype); use "
             "sum", t.type().str());
  Work w = pg.backend(c.device()).all_reduce(c, op);
  if (c.impl() == t.impl()) return w;
  w.wait();  // reduced through a copy: written back before the caller sees it
  t.copy_(c);
  return w;
}

void all_reduce(ProcessGroup& pg, Tensor& t, ReduceOp op) { all_reduce_async(pg, t, op).wait(); }

Work broadcast_async(ProcessGroup& pg, Tensor& t, int root) {
  KILN_CHECK(root >= 0 && root < pg.world_size(), "distributed: broadcast: root {} is outside 0..{}", root,
             pg.world_size() - 1);
  Tensor c = contiguous_operand(t, "broadcast");
  Work w = pg.backend(c.device()).broadcast(c, root);
  if (c.impl() == t.impl()) return w;
  w.wait();
  t.copy_(c);
  return w;
}

void broadcast(ProcessGroup& pg, Tensor& t, int root) { broadcast_async(pg, t, root).wait(); }

Tensor all_gather(ProcessGroup& pg, const Tensor& t) {
  Tensor in = contiguous_operand(t, "all_gather");
  Dims shape = in.shape().vec();
  shape.insert(0, pg.world_size());
  Tensor out = empty(shape, in.dtype(), in.device());
  pg.backend(in.device()).all_gather(out, in).wait();
  return out;
}

Tensor reduce_scatter(ProcessGroup& pg, const Tensor& t, ReduceOp op) {
  Tensor in = contiguous_operand(t, "reduce_scatter");
  KILN_CHECK(in.dim() >= 1 && in.shape()[0] % pg.world_size() == 0,
             "distributed: reduce_scatter: dim 0 of {} must divide into {} blocks (one per rank)", in.type().str(),
             pg.world_size());
  KILN_CHECK(op != ReduceOp::Mean || is_float(in.dtype()), "distributed: reduce_scatter: mean of {} (an integer "
             "dtype); use sum", in.type().str());
  Dims shape = in.shape().vec();
  shape[0] /= pg.world_size();
  Tensor out = empty(shape, in.dtype(), in.device());
  pg.backend(in.device()).reduce_scatter(out, in, op).wait();
  return out;
}

void barrier(ProcessGroup& pg) { pg.backend().barrier().wait(); }

}  // namespace kiln::distributed
