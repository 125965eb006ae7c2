// tests/cuda/host/nccl_cuda.cpp -- the host CUDA's NCCL: the calls kiln makes, with nccl.h's
// types, between processes on one machine. The unique id names a fresh folder; each collective
// runs on its stream's queue (as NCCL's kernels do): every rank writes its buffer to a file
// there, waits until all ranks' files of that collective are complete, and computes its result
// from them, so the collectives are real exchanges between the processes, in stream order. A
// rank that does not arrive within KILN_HOST_NCCL_TIMEOUT_S (default 60) ends the process with
// a message; the folder goes when the communicators are destroyed. kiln loads it instead of
// libnccl when KILN_CUDA_NCCL names it.
//
// As NCCL's: a non-blocking communicator is in progress until every rank has joined (each
// marks its arrival in the folder); ncclCommAbort makes the collectives in flight return at
// once. KILN_HOST_NCCL_HANG_RANK=r makes rank r hang in its collectives (they never publish,
// until aborted), as a rank stuck on its GPU would. A communicator holds kCommBytes of its
// device's memory (NCCL's buffers, outside kiln's cache) until it is destroyed or aborted:
// past the device's budget, making it fails as NCCL's cudaMalloc would.
#include <cuda.h>
#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "runtime/half.h"
#include "tests/cuda/host/queue_cuda.h"

struct ncclComm {
  std::string dir;
  int nranks = 0, rank = 0;
  uint64_t seq = 0;         // collectives issued so far: every rank issues the same ones in order
  CUstream last = nullptr;  // where the last one was queued
  std::atomic<bool> aborted{false};
  std::atomic<int> state{ncclSuccess};  // ncclInProgress until every rank has joined
  int device = 0;                       // whose memory it holds
};

constexpr long long kCommBytes = 8 << 20;

namespace {

// Calls f with a zero of the C++ type that holds t's elements (f16 and bf16 as their bits).
template <class F> void by_type(ncclDataType_t t, F f) {
  switch (t) {
    case ncclInt8: return f(int8_t{});
    case ncclUint8: return f(uint8_t{});
    case ncclInt32: return f(int32_t{});
    case ncclUint32: return f(uint32_t{});
    case ncclInt64: return f(int64_t{});
    case ncclUint64: return f(uint64_t{});
    case ncclFloat16:
    case ncclBfloat16: return f(uint16_t{});
    case ncclFloat32: return f(float{});
    default: return f(double{});
  }
}

size_t type_size(ncclDataType_t t) {
  size_t n = 0;
  by_type(t, [&](auto zero) { n = sizeof zero; });
  return n;
}

std::string file_of(const ncclComm& c, uint64_t seq, int rank) {
  return c.dir + "/" + std::to_string(seq) + "." + std::to_string(rank);
}

// Publishes this rank's bytes for collective `seq` (written, then renamed: never half-read).
// Its file of collective seq - 2 goes: every rank has read it, since each publishes seq - 1
// only after it has gathered seq - 2.
void publish(const ncclComm& c, uint64_t seq, const char* data, size_t bytes) {
  std::string f = file_of(c, seq, c.rank), tmp = f + ".tmp";
  std::ofstream(tmp, std::ios::binary).write(data, static_cast<std::streamsize>(bytes));
  std::rename(tmp.c_str(), f.c_str());
  if (seq >= 2) unlink(file_of(c, seq - 2, c.rank).c_str());
}

std::string join_file(const ncclComm& c, int rank) { return c.dir + "/join." + std::to_string(rank); }

// Whether every rank has joined the communicator.
bool all_joined(const ncclComm& c) {
  for (int r = 0; r < c.nranks; ++r)
    if (access(join_file(c, r).c_str(), F_OK) != 0) return false;
  return true;
}

// Whether this rank hangs in its collectives (KILN_HOST_NCCL_HANG_RANK); it waits, publishing
// nothing, until its communicator is aborted.
bool hangs(const ncclComm& c) {
  const char* env = std::getenv("KILN_HOST_NCCL_HANG_RANK");
  if (!env || !*env || std::atoi(env) != c.rank) return false;
  while (!c.aborted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return true;
}

// Every rank's bytes of collective `seq`, waiting for the ones still to come; empty when the
// communicator is aborted meanwhile.
std::vector<std::string> gather(const ncclComm& c, uint64_t seq) {
  const char* env = std::getenv("KILN_HOST_NCCL_TIMEOUT_S");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(env && *env ? std::atoi(env) : 60);
  std::vector<std::string> all(static_cast<size_t>(c.nranks));
  for (int r = 0; r < c.nranks; ++r) {
    std::string f = file_of(c, seq, r);
    while (access(f.c_str(), R_OK) != 0) {
      if (c.aborted.load()) return {};
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "host NCCL: rank %d waited for rank %d at collective %llu past the timeout\n", c.rank, r,
                     static_cast<unsigned long long>(seq));
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::ifstream in(f, std::ios::binary);
    all[static_cast<size_t>(r)].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return all;
}

// a op b in T: integers wrap (as NCCL's do), floats keep a NaN.
template <class T> T combine(ncclRedOp_t op, T a, T b) {
  if (op == ncclMax) return a > b || a != a ? a : b;
  if (op == ncclMin) return a < b || a != a ? a : b;
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(op == ncclProd ? static_cast<U>(a) * static_cast<U>(b)
                                         : static_cast<U>(a) + static_cast<U>(b));
  } else {
    return op == ncclProd ? a * b : a + b;  // sum, avg
  }
}

// The reduction of every rank's `count` elements from element `first` of each, in rank order,
// in the elements' own type (f16 and bf16 in float, rounded once at the end, as NCCL's are).
void reduce(const std::vector<std::string>& all, ncclDataType_t t, ncclRedOp_t op, size_t first, size_t count,
            char* out) {
  const bool half = t == ncclFloat16, bf16 = t == ncclBfloat16;
  by_type(t, [&](auto zero) {
    using T = decltype(zero);
    auto element = [&](size_t r, size_t i) {
      T v;
      std::memcpy(&v, all[r].data() + (first + i) * sizeof(T), sizeof(T));
      return v;
    };
    for (size_t i = 0; i < count; ++i) {
      T result;
      if (half || bf16) {
        auto widen = [&](T bits) { return half ? kiln::Half::to_float(bits) : kiln::BFloat16::to_float(bits); };
        float v = widen(element(0, i));
        for (size_t r = 1; r < all.size(); ++r) v = combine<float>(op, v, widen(element(r, i)));
        if (op == ncclAvg) v /= static_cast<float>(all.size());
        result = half ? kiln::Half::from_float(v) : kiln::BFloat16::from_float(v);
      } else {
        T v = element(0, i);
        for (size_t r = 1; r < all.size(); ++r) v = combine<T>(op, v, element(r, i));
        if (op == ncclAvg) v = static_cast<T>(v / static_cast<T>(all.size()));
        result = v;
      }
      std::memcpy(out + i * sizeof(T), &result, sizeof(T));
    }
  });
}

// The folders this process made (as rank 0) and has not removed: they go when it exits, as a
// communicator never destroyed (a group kept for the whole process) would leave them.
struct Folders {
  std::mutex mu;
  std::set<std::string> dirs;
  ~Folders() {
    std::error_code ignored;
    for (const std::string& d : dirs) std::filesystem::remove_all(d, ignored);
  }
};
Folders& folders() {
  static Folders f;
  return f;
}

void enqueue(ncclComm_t c, cudaStream_t s, std::function<void(uint64_t)> fn) {
  uint64_t seq = c->seq++;
  c->last = reinterpret_cast<CUstream>(s);
  kiln_host_enqueue(
      reinterpret_cast<CUstream>(s), [fn = std::move(fn), seq] { fn(seq); }, "host_nccl_collective");
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "host NCCL error"; }

ncclResult_t ncclGetVersion(int* v) {
  *v = 22800;
  return ncclSuccess;
}

// A fresh folder of its own, named in the id.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-host-nccl-XXXXXX";
  if (!mkdtemp(pattern.data()) || pattern.size() >= NCCL_UNIQUE_ID_BYTES) return ncclSystemError;
  std::memset(id->internal, 0, NCCL_UNIQUE_ID_BYTES);
  std::memcpy(id->internal, pattern.data(), pattern.size());
  std::lock_guard<std::mutex> lock(folders().mu);
  folders().dirs.insert(pattern);
  return ncclSuccess;
}

// Joins: marks this rank's arrival. Blocking, it waits for the others; non-blocking, the
// communicator is in progress until they have all come (ncclCommGetAsyncError).
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  std::string dir(id.internal, strnlen(id.internal, NCCL_UNIQUE_ID_BYTES));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ncclInvalidArgument;
  const int device = kiln_host_current_device();
  if (!kiln_host_reserve(kCommBytes, device)) return ncclUnhandledCudaError;
  auto* c = new ncclComm;
  c->device = device;
  c->dir = dir;
  c->nranks = nranks;
  c->rank = rank;
  std::ofstream(join_file(*c, rank)).put('1');
  *comm = c;
  if (config && config->blocking == 0) {
    c->state = all_joined(*c) ? ncclSuccess : ncclInProgress;
    return static_cast<ncclResult_t>(c->state.load());
  }
  while (!all_joined(*c)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (!comm) return ncclInvalidArgument;
  if (comm->state.load() == ncclInProgress && all_joined(*comm)) comm->state = ncclSuccess;
  *error = static_cast<ncclResult_t>(comm->state.load());
  return ncclSuccess;
}

// The collectives in flight return (a hung rank's too), then the communicator goes.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  comm->aborted = true;
  if (comm->last) cuStreamSynchronize(comm->last);
  kiln_host_reserve(-kCommBytes, comm->device);
  delete comm;
  return ncclSuccess;
}

// Each rank marks its end once its collectives have run (a last, empty publication); rank 0
// removes the folder when every rank has, so no rank is still reading from it. A rank that never
// marks (it died) leaves the folder behind after a few seconds' wait.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  if (comm->last) cuStreamSynchronize(comm->last);
  uint64_t end = comm->seq;
  publish(*comm, end, "", 0);
  if (comm->rank == 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool all = false;
    while (!all && std::chrono::steady_clock::now() < deadline) {
      all = true;
      for (int r = 0; r < comm->nranks && all; ++r) all = access(file_of(*comm, end, r).c_str(), F_OK) == 0;
      if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::error_code ignored;
    if (all) {
      std::filesystem::remove_all(comm->dir, ignored);
      std::lock_guard<std::mutex> lock(folders().mu);
      folders().dirs.erase(comm->dir);
    }
  }
  kiln_host_reserve(-kCommBytes, comm->device);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s) {
  enqueue(comm, s, [=](uint64_t seq) {
    if (hangs(*comm)) return;
    publish(*comm, seq, static_cast<const char*>(send), count * type_size(t));
    std::vector<std::string> all = gather(*comm, seq);
    if (!all.empty()) reduce(all, t, op, 0, count, static_cast<char*>(recv));
  });
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t s) {
  enqueue(comm, s, [=](uint64_t seq) {
    if (hangs(*comm)) return;
    size_t bytes = count * type_size(t);
    publish(*comm, seq, comm->rank == root ? static_cast<const char*>(send) : "", comm->rank == root ? bytes : 0);
    std::vector<std::string> all = gather(*comm, seq);
    if (!all.empty()) std::memcpy(recv, all[static_cast<size_t>(root)].data(), bytes);
  });
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t s) {
  enqueue(comm, s, [=](uint64_t seq) {
    if (hangs(*comm)) return;
    size_t bytes = count * type_size(t);
    publish(*comm, seq, static_cast<const char*>(send), bytes);
    std::vector<std::string> all = gather(*comm, seq);
    for (size_t r = 0; r < all.size(); ++r) std::memcpy(static_cast<char*>(recv) + r * bytes, all[r].data(), bytes);
  });
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s) {
  enqueue(comm, s, [=](uint64_t seq) {
    if (hangs(*comm)) return;
    publish(*comm, seq, static_cast<const char*>(send), count * static_cast<size_t>(comm->nranks) * type_size(t));
    std::vector<std::string> all = gather(*comm, seq);
    if (!all.empty()) reduce(all, t, op, count * static_cast<size_t>(comm->rank), count, static_cast<char*>(recv));
  });
  return ncclSuccess;
}

}  // extern "C"
