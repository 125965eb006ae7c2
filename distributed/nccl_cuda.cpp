// distributed/nccl_cuda.cpp -- NCCL, the collective engine of CUDA tensors, loaded with dlopen
// (KILN_CUDA_NCCL, else libnccl.so.2 on the library path or in /usr/local/cuda). One
// communicator per process group and device, made on the group's first collective on that
// device: rank 0 draws the unique id and puts it in the group's TCP store, every rank reads it
// and joins. The collectives run in issue order on a stream of their own, which first waits
// (through an event, not the host) for the work the caller's stream queued on the tensors; a
// Work completes on an event recorded after the collective, and its wait() makes the caller's
// current stream wait for that event, without blocking the host. The tensors are recorded on
// the NCCL stream, so the caching allocator never hands their memory out while it runs.
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "distributed/nccl.h"
#include "distributed/work.h"
#include "runtime/check.h"
#include "runtime/cuda/library_cuda.h"
#include "runtime/cuda.h"

namespace kiln::distributed {
namespace {

#define KILN_NCCL_FUNCTIONS(X)                                                                               \
  X(ncclGetErrorString) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclAllReduce)            \
  X(ncclBroadcast) X(ncclAllGather) X(ncclReduceScatter)

struct Nccl {
#define KILN_NCCL_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_NCCL_FUNCTIONS(KILN_NCCL_DECLARE)
#undef KILN_NCCL_DECLARE
  bool ok = false;
  std::string reason;
};

Nccl load() {
  Nccl n;
  void* lib = cuda::open_library("KILN_CUDA_NCCL", {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"}, "NCCL",
                                 &n.reason);
  if (!lib) return n;
  std::string missing;
#define KILN_NCCL_LOAD(fn)                                   \
  n.fn = reinterpret_cast<decltype(n.fn)>(dlsym(lib, #fn));  \
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
  KILN_CHECK(r == ncclSuccess, "distributed: {} on CUDA: NCCL's {} failed: {}", what, call, nccl().ncclGetErrorString(r));
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
  throw Error(fmt::format("distributed: {} of {} is not supported on CUDA (NCCL takes f32, f64, f16, bf16, i32, i64 "
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

class NcclBackend final : public Backend {
 public:
  NcclBackend(TcpStore& store, const Options& o, int device, const std::string& key, CollectiveCheck check)
      : rank_(o.rank), world_(o.world_size), device_(device), check_(std::move(check)) {
    const Nccl& n = nccl();
    KILN_CHECK(n.ok, "distributed: a collective on cuda:{} needs NCCL, which is not available: {}", device, n.reason);
    ncclUniqueId id;
    if (o.rank == 0) {
      check_nccl(n.ncclGetUniqueId(&id), "ncclGetUniqueId", "joining the group");
      store.set(key, std::vector<char>(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES));
    } else {
      std::vector<char> v = store.get(key, o.timeout);
      KILN_CHECK(v.size() == NCCL_UNIQUE_ID_BYTES, "distributed: the NCCL id in the store has {} bytes, not {}", v.size(),
                 NCCL_UNIQUE_ID_BYTES);
      std::memcpy(id.internal, v.data(), NCCL_UNIQUE_ID_BYTES);
    }
    stream_ = cuda::Stream::create(device);  // the group's collectives on this device run here
    cuda::StreamGuard on(stream_);           // and the communicator is made on its device
    check_nccl(n.ncclCommInitRank(&comm_, o.world_size, id, o.rank), "ncclCommInitRank", "joining the group");
  }
  ~NcclBackend() override {
    if (comm_) nccl().ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Device device() const override { return cuda::device(device_); }

  Work all_reduce(Tensor t, ReduceOp op) override {
    ncclDataType_t type = nccl_type(t.dtype(), "all_reduce");
    return run("all_reduce", {t}, [&](cudaStream_t s) {
      return nccl().ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, nccl_op(op), comm_, s);
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
  // Queues a collective on the NCCL stream after the caller's work on `tensors` (the first is
  // the operand the ranks compare).
  template <class F>
  Work run(const char* name, std::initializer_list<Tensor> tensors, F call) {
    for (const Tensor& t : tensors)
      KILN_CHECK(t.device() == cuda::device(device_), "distributed: {}: {} is on {}, not on cuda:{} with the other "
                 "operands", name, t.type().str(), t.device().str(), device_);
    if (check_) check_(name, *tensors.begin());
    cuda::Stream caller = cuda::current_stream(device_);
    cuda::Event ready;
    ready.record(caller);
    ready.block(stream_);
    for (const Tensor& t : tensors) t.record_stream(stream_);
    check_nccl(call(reinterpret_cast<cudaStream_t>(stream_.handle())), name, name);
    auto state = std::make_shared<Work::State>();
    state->event = std::make_shared<cuda::Event>();
    state->event->record(stream_);
    state->device = device_;
    return Work(state);
  }

  int rank_, world_, device_;
  CollectiveCheck check_;
  cuda::Stream stream_;
  ncclComm_t comm_ = nullptr;
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
