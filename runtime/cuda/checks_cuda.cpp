// runtime/cuda/checks_cuda.cpp -- eager index checks deferred to the next call that waits for
// the device (runtime/cuda_internal.h): a gather or scatter writes its error flag into a slot of
// its device's flags and returns; the flags are read when the program next synchronizes
// (to(cpu), item(), cuda::synchronize(), a stream's synchronize) or when the slots run out, as
// CUDA reports its own kernels' errors. cuda::set_sync_index_checks(true), or
// KILN_CUDA_SYNC_CHECKS=1, checks at the call instead (the op runs its own flag and reads it).
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/api.h"
#include "runtime/check.h"
#include "runtime/cuda/context_cuda.h"
#include "runtime/cuda_internal.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kSlots = 256;

std::atomic<int> g_sync{-1};  // -1: KILN_CUDA_SYNC_CHECKS not read yet

struct Pending {
  const char* op;
  int64_t size;
  Tensor flag;  // defer_check's (a graph's slot); the slot's own for an eager op
};

struct DeviceChecks {
  std::mutex mu;
  Tensor flags;                   // [kSlots, 2] i64 on the device: zero, or {1, the bad index}
  std::vector<Pending> pending;   // per slot taken since the last read
  std::vector<Pending> external;  // defer_check's, since the last read
};

std::array<DeviceChecks, 64>& all_checks() {
  static auto* c = new std::array<DeviceChecks, 64>;  // never destroyed: read at exit too
  return *c;
}

thread_local bool t_reading = false;  // the read itself copies and synchronizes

// Waits for the device, reads its flags, zeroes them for the next slots; throws for the first
// bad index. `c.mu` is held.
void read_locked(int device, DeviceChecks& c) {
  if (c.pending.empty() && c.external.empty()) return;
  t_reading = true;
  std::vector<int64_t> f;
  std::vector<Pending> pending = std::move(c.pending);
  c.pending.clear();
  try {
    bind(device, "index checks");
    check(driver()->cuCtxSynchronize(), "cuCtxSynchronize");  // every stream's kernels wrote theirs
    auto zero = [&](const Tensor& t) {
      check(driver()->cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(t.data_ptr()), 0,
                                      static_cast<size_t>(t.numel() * 8), current(device)),
            "cuMemsetD8Async");
    };
    if (!pending.empty()) {
      f = c.flags.to(cpu).to_vector<int64_t>();
      f.resize(2 * pending.size());
      zero(c.flags);
    }
    for (Pending& e : c.external) {
      std::vector<int64_t> v = e.flag.to(cpu).to_vector<int64_t>();
      zero(e.flag);
      f.insert(f.end(), v.begin(), v.end());
      pending.push_back(std::move(e));
    }
    c.external.clear();
    check(driver()->cuCtxSynchronize(), "cuCtxSynchronize");  // zero before any stream reuses a slot
  } catch (...) {
    t_reading = false;
    throw;
  }
  t_reading = false;
  for (size_t k = 0; k < pending.size(); ++k)
    KILN_CHECK(f[2 * k] == 0,
               "{}: index {} is out of range for a dim of size {} (found after the call returned, at the next "
               "call that waited for cuda:{}; cuda::set_sync_index_checks(true) or KILN_CUDA_SYNC_CHECKS=1 reports "
               "it at the call)",
               pending[k].op, f[2 * k + 1], pending[k].size, device);
}

DeviceChecks& checks_of(int device) {
  KILN_CHECK(device >= 0 && device < 64, "index checks: cuda:{} is beyond the 64 devices kiln tracks", device);
  return all_checks()[static_cast<size_t>(device)];
}

}  // namespace

bool sync_index_checks() {
  int s = g_sync.load(std::memory_order_relaxed);
  if (s < 0) {
    const char* e = std::getenv("KILN_CUDA_SYNC_CHECKS");
    s = e && std::string(e) == "1" ? 1 : 0;
    g_sync.store(s, std::memory_order_relaxed);
  }
  return s == 1;
}

void set_sync_index_checks(bool on) { g_sync.store(on ? 1 : 0, std::memory_order_relaxed); }

Tensor deferred_check_flag(int device, const char* op, int64_t size) {
  DeviceChecks& c = checks_of(device);
  std::lock_guard<std::mutex> lock(c.mu);
  if (static_cast<int64_t>(c.pending.size()) == kSlots) read_locked(device, c);  // slots ran out
  if (!c.flags.defined()) {
    c.flags = zeros({kSlots, 2}, DType::I64, cuda::device(device));
    check(driver()->cuStreamSynchronize(current(device)), "cuStreamSynchronize");  // zero for every stream
  }
  c.pending.push_back({op, size, Tensor()});
  return c.flags[static_cast<int64_t>(c.pending.size()) - 1];
}

void defer_check(int device, const Tensor& flag, const char* op, int64_t size) {
  KILN_CHECK(flag.numel() == 2 && flag.dtype() == DType::I64 && flag.is_contiguous() && flag.device().is_cuda(),
             "index checks: a flag is a contiguous i64[2] on a CUDA device, not {}", flag.type().str());
  DeviceChecks& c = checks_of(device);
  std::lock_guard<std::mutex> lock(c.mu);
  for (const Pending& e : c.external)
    if (e.flag.data_ptr() == flag.data_ptr()) return;
  c.external.push_back({op, size, flag});
}

void read_deferred_checks(int device) {
  if (t_reading || device < 0 || device >= 64) return;
  DeviceChecks& c = all_checks()[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(c.mu);
  read_locked(device, c);
}

}  // namespace kiln::cuda
