// distributed/collective_check.cpp -- the cross-rank checks around each collective
// (Options::check): the ranks compare what they were asked (kind, dtype, shape) through Gloo
// and mark their arrival in the TcpStore, so that a mismatch, a rank that did not arrive, or
// one that left the job is named instead of hanging. NCCL's collectives (distributed/nccl.h)
// run the same check through check_only.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/allgather.h>
#include <gloo/rendezvous/context.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "distributed/gloo_backend.h"
#include "distributed/tcp_store.h"

namespace kiln::distributed::detail {

void GlooBackend::check_only(const char* name, const Tensor& t) {
  enqueue(name, t, [](uint32_t) {}).wait();
}

// The cheap per-collective check: each rank marks its arrival in the store, then the ranks
// exchange (kind, dtype, shape) and compare.
void GlooBackend::check(const Op& op, uint64_t seq) {
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
      throw Error(
          fmt::format("distributed: {} (collective #{}) on rank {}: rank {} called another collective at "
                      "this point; every rank must issue the same collectives in the same order",
                      op.name, seq, o_.rank, r));
    throw Error(
        fmt::format("distributed: {} (collective #{}): rank {} gives {} but rank {} gives {}; every rank "
                    "must pass the same dtype and shape (Options::check)",
                    op.name, seq, o_.rank, describe(mine), r, describe(theirs)));
  }
}

// A collective failed in the engine (a timeout, a closed connection): which ranks did not
// arrive at it, from their marks in the store; or, when all did, which left the job since.
std::string GlooBackend::failure(const char* name, uint64_t seq, const std::string& why) {
  std::string ranks;
  if (o_.check) {
    try {
      std::vector<int> missing;
      for (int r = 0; r < o_.world_size; ++r) {
        std::vector<char> v;
        uint64_t s = 0;
        if (store_->try_get(fmt::format("arrived/{}", r), &v) && v.size() == sizeof s)
          std::memcpy(&s, v.data(), sizeof s);
        if (s < seq) missing.push_back(r);
      }
      std::vector<int> gone = missing.empty() ? gone_ranks() : std::vector<int>{};
      if (!missing.empty())
        ranks = fmt::format(": rank {} did not arrive (it died, or never called {})", fmt::join(missing, ", "), name);
      else if (!gone.empty())
        ranks = fmt::format(": rank {} arrived at it, then left the job (it died, or its host became unreachable)",
                            fmt::join(gone, ", "));
      else ranks = " (every rank arrived at it, and none has left the job)";
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
std::vector<int> GlooBackend::gone_ranks() {
  auto deadline =
      std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(o_.timeout, std::chrono::seconds(5));
  for (;;) {
    std::vector<int> gone;
    std::vector<char> v;
    for (int r = 0; r < o_.world_size; ++r)
      if (r != o_.rank && store_->try_get(fmt::format("gone/{}", r), &v)) gone.push_back(r);
    if (!gone.empty() || std::chrono::steady_clock::now() >= deadline) return gone;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace kiln::distributed::detail
