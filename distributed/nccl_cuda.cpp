// distributed/nccl_cuda.cpp -- NCCL, the collective engine of CUDA tensors, loaded with dlopen
// (KILN_CUDA_NCCL, else libnccl.so.2 on the library path or in /usr/local/cuda). One
// communicator per process group and device, made on the group's first collective on that
// device: rank 0 draws the unique id and puts it in the group's TCP store, every rank reads it
// and joins. The collectives run in issue order on a stream of their own, which first waits
// (through an event, not the host) for the work the caller's stream queued on the tensors; a
// Work completes on an event recorded after the collective, and its wait() makes the caller's
// current stream wait for that event, without blocking the host. The tensors are recorded on
// the NCCL stream, so the caching allocator never hands their memory out while it runs.
//
// A dead or hung peer must not hang the others (as Gloo's side, it is an error naming the rank
// and the collective). The cross-rank check runs before the communicator is made, so ranks that
// disagree at their first CUDA collective are named, not stuck in init; the communicator is made
// non-blocking and polled against Options::timeout; and a watchdog thread polls each collective
// in flight and NCCL's asynchronous error. Past the timeout, or on an error, it aborts the
// communicator (NCCL's kernels then return, so the streams waiting on them go on) and the
// group's later collectives, and waits on the failed ones, throw its message: a step's results
// after a failure are never taken for good ones.
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/nccl.h"
#include "distributed/work.h"
#include "runtime/check.h"
#include "runtime/cuda.h"
#include "runtime/cuda/library_cuda.h"
#include "runtime/log.h"

namespace kiln::distributed {
namespace {

// clang-format off: one entry a line (the formatter would stair-step them)
#define KILN_NCCL_FUNCTIONS(X) \
  X(ncclGetErrorString)        \
  X(ncclGetUniqueId)           \
  X(ncclCommInitRankConfig)    \
  X(ncclCommGetAsyncError)     \
  X(ncclCommAbort)             \
  X(ncclCommDestroy)           \
  X(ncclAllReduce)             \
  X(ncclBroadcast)             \
  X(ncclAllGather)             \
  X(ncclReduceScatter)
// clang-format on

struct Nccl {
#define KILN_NCCL_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_NCCL_FUNCTIONS(KILN_NCCL_DECLARE)
#undef KILN_NCCL_DECLARE
  bool ok = false;
  std::string reason;
};

Nccl load() {
  Nccl n;
  void* lib =
      cuda::open_library("KILN_CUDA_NCCL", {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"}, "NCCL", &n.reason);
  if (!lib) return n;
  std::string missing;
#define KILN_NCCL_LOAD(fn)                                  \
  n.fn = reinterpret_cast<decltype(n.fn)>(dlsym(lib, #fn)); \
  if (!n.fn) missing += std::string(missing.empty() ? "" : ", ") + #fn;
  KILN_NCCL_FUNCTIONS(KILN_NCCL_LOAD)
#undef KILN_NCCL_LOAD
  n.ok = missing.empty();
  if (!n.ok) n.reason = "NCCL lacks " + missing;
  return n;
}

const Nccl& nccl() {
  static const Nccl n = load();
  return n;
}

void check_nccl(ncclResult_t r, const char* call, const char* what) {
  KILN_CHECK(r == ncclSuccess, "distributed: {} on CUDA: NCCL's {} failed: {}", what, call,
             nccl().ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t, const char* what) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    default: break;
  }
  throw Error(
      fmt::format("distributed: {} of {} is not supported on CUDA (NCCL takes f32, f64, f16, bf16, i32, i64 "
                  "and u8)",
                  what, dtype_name(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Mean: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

using Clock = std::chrono::steady_clock;

class NcclBackend final : public Backend {
 public:
  NcclBackend(TcpStore& store, const Options& o, int device, const std::string& key, CollectiveCheck check)
      : store_(store), o_(o), key_(key), device_(device), check_(std::move(check)) {
    const Nccl& n = nccl();
    KILN_CHECK(n.ok, "distributed: a collective on cuda:{} needs NCCL, which is not available: {}", device, n.reason);
    stream_ = cuda::Stream::create(device);  // the group's collectives on this device run here
  }
  ~NcclBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    if (watchdog_.joinable()) watchdog_.join();
    if (comm_ && !aborted_) nccl().ncclCommDestroy(comm_);
  }

  int rank() const override { return o_.rank; }
  int world_size() const override { return o_.world_size; }
  Device device() const override { return cuda::device(device_); }

  Work all_reduce(Tensor t, ReduceOp op) override {
    ncclDataType_t type = nccl_type(t.dtype(), "all_reduce");
    return run("all_reduce", {t}, [&](cudaStream_t s) {
      return nccl().ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, nccl_op(op), comm_,
                                  s);
    });
  }
  Work broadcast(Tensor t, int root) override {
    ncclDataType_t type = nccl_type(t.dtype(), "broadcast");
    return run("broadcast", {t}, [&](cudaStream_t s) {
      return nccl().ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, root, comm_, s);
    });
  }
  Work all_gather(Tensor out, Tensor in) override {
    ncclDataType_t type = nccl_type(in.dtype(), "all_gather");
    return run("all_gather", {in, out}, [&](cudaStream_t s) {
      return nccl().ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), type, comm_, s);
    });
  }
  Work reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    ncclDataType_t type = nccl_type(in.dtype(), "reduce_scatter");
    return run("reduce_scatter", {in, out}, [&](cudaStream_t s) {
      return nccl().ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()), type,
                                      nccl_op(op), comm_, s);
    });
  }
  // A one-element all-reduce: it completes when every rank has reached it.
  Work barrier() override {
    Tensor one = Tensor::empty({DType::F32, {1}, cuda::device(device_)});
    return all_reduce(one, ReduceOp::Sum);
  }

 private:
  struct InFlight {
    std::shared_ptr<Work::State> state;
    Clock::time_point deadline;
    const char* name;
    uint64_t seq;
  };

  // The failure that ended the communicator, if any (thrown by every later collective).
  void throw_if_failed() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) throw Error(failure_);
  }

  // Polls NCCL's asynchronous state until `r` is no longer in progress, within the timeout.
  ncclResult_t settle(ncclResult_t r, Clock::time_point deadline) {
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      nccl().ncclCommGetAsyncError(comm_, &r);
    }
    return r;
  }

  // Makes the communicator (after the first collective's check): rank 0 draws the id and puts
  // it in the store, every rank reads it and joins, non-blocking, within the timeout. Device
  // memory NCCL takes comes outside the cache, which is freed first.
  void join() {
    const Nccl& n = nccl();
    ncclUniqueId id;
    if (o_.rank == 0) {
      check_nccl(n.ncclGetUniqueId(&id), "ncclGetUniqueId", "joining the group");
      store_.set(key_, std::vector<char>(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES));
    } else {
      std::vector<char> v = store_.get(key_, o_.timeout);
      KILN_CHECK(v.size() == NCCL_UNIQUE_ID_BYTES, "distributed: the NCCL id in the store has {} bytes, not {}",
                 v.size(), NCCL_UNIQUE_ID_BYTES);
      std::memcpy(id.internal, v.data(), NCCL_UNIQUE_ID_BYTES);
    }
    cuda::StreamGuard on(stream_);  // the communicator is made on its device
    cuda::empty_cache();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = n.ncclCommInitRankConfig(&comm_, o_.world_size, id, o_.rank, &config);
    r = settle(r, Clock::now() + o_.timeout);
    if (r == ncclInProgress) {
      n.ncclCommAbort(comm_);
      comm_ = nullptr;
      throw Error(
          fmt::format("distributed: rank {} of {}: NCCL's communicator on cuda:{} was not made within the {} ms "
                      "timeout: a rank did not join (it died, or is at another collective; Options::check "
                      "names which)",
                      o_.rank, o_.world_size, device_, o_.timeout.count()));
    }
    check_nccl(r, "ncclCommInitRankConfig", "joining the group");
    watchdog_ = std::thread([this] { watch(); });
  }

  // Queues a collective on the NCCL stream after the caller's work on `tensors` (the first is
  // the operand the ranks compare).
  template <class F> Work run(const char* name, std::initializer_list<Tensor> tensors, F call) {
    for (const Tensor& t : tensors)
      KILN_CHECK(t.device() == cuda::device(device_),
                 "distributed: {}: {} is on {}, not on cuda:{} with the other "
                 "operands",
                 name, t.type().str(), t.device().str(), device_);
    throw_if_failed();
    if (check_) check_(name, *tensors.begin());
    if (!comm_) join();
    cuda::Stream caller = cuda::current_stream(device_);
    cuda::Event ready;
    ready.record(caller);
    ready.block(stream_);
    for (const Tensor& t : tensors) t.record_stream(stream_);
    check_nccl(settle(call(reinterpret_cast<cudaStream_t>(stream_.handle())), Clock::now() + o_.timeout), name, name);
    auto state = std::make_shared<Work::State>();
    state->event = std::make_shared<cuda::Event>();
    state->event->record(stream_);
    state->device = device_;
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.push_back({state, Clock::now() + o_.timeout, name, seq_++});
    return Work(state);
  }

  // The watchdog: every few milliseconds, the collectives that completed leave the list; one
  // past its deadline, or an asynchronous error, aborts the communicator and fails them all.
  void watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_ || aborted_) return;
      std::erase_if(in_flight_, [](const InFlight& w) {
        if (!w.state->event->query()) return false;
        w.state->finish(false, "");
        return true;
      });
      ncclResult_t async = ncclSuccess;
      nccl().ncclCommGetAsyncError(comm_, &async);
      std::string why;
      if (async != ncclSuccess && async != ncclInProgress)
        why = fmt::format("NCCL reported an error: {}", nccl().ncclGetErrorString(async));
      else if (!in_flight_.empty() && Clock::now() > in_flight_.front().deadline)
        why = fmt::format("it did not complete within the {} ms timeout", o_.timeout.count());
      if (why.empty()) continue;
      const InFlight& first = in_flight_.front();
      failure_ = fmt::format(
          "distributed: {} (NCCL collective #{}) on cuda:{} failed on rank {} of {}: {}; the "
          "communicator was aborted (a rank died or hung in NCCL, or, with Options::check off, the "
          "ranks issued different collectives)",
          first.name, first.seq, device_, o_.rank, o_.world_size, why);
      if (log_enabled(LogTopic::Cuda)) log(LogTopic::Cuda, failure_);
      aborted_ = true;
      std::vector<InFlight> failed = std::move(in_flight_);
      lock.unlock();
      nccl().ncclCommAbort(comm_);  // NCCL's kernels return: the streams after them go on
      for (const InFlight& w : failed) w.state->finish(true, failure_);
      return;
    }
  }

  TcpStore& store_;
  Options o_;
  std::string key_;
  int device_;
  CollectiveCheck check_;
  cuda::Stream stream_;
  ncclComm_t comm_ = nullptr;
  std::mutex mu_;  // guards what follows, shared with the watchdog
  std::vector<InFlight> in_flight_;
  uint64_t seq_ = 0;
  std::string failure_;
  bool stop_ = false, aborted_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(TcpStore& store, const Options& options, int device, const std::string& key,
                                           CollectiveCheck check) {
  return std::make_unique<NcclBackend>(store, options, device, key, std::move(check));
}

bool nccl_available(std::string* why) {
  if (!nccl().ok && why) *why = nccl().reason;
  return nccl().ok;
}

}  // namespace kiln::distributed
