// benchmarks/copy_limit.h -- the memory-bandwidth limit the table's "copy" rows report.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

namespace kiln::bench {

/// Times a plain copy of `bytes` bytes, the bound for a case that must move them: the faster
/// of two copies, picked per case from a few untimed runs of each. One is memcpy in 1 MiB
/// chunks over kiln's pool; the other a STREAM-style loop (vectorized for this machine, one
/// contiguous part per thread), which reads faster than memcpy here (37.6 against 23 GB/s on
/// one day). Counts reads and writes, or with `reads_only` only the reads (for a case that
/// only reads, such as sum).
void copy_case(benchmark::State& s, int64_t bytes, bool reads_only = false);

}  // namespace kiln::bench
