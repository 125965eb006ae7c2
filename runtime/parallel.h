// runtime/parallel.h -- kiln's thread pool: one setting governs it and BLAS together.
#pragma once

#include <cstdint>
#include <utility>

namespace kiln {

/// Splits [begin, end) into at most num_threads() contiguous chunks of at least `grain`
/// items and runs fn(chunk_begin, chunk_end) on them in parallel; returns when all are done.
/// Runs inline when the range is small, when called from inside a parallel region, or when
/// another thread is using the pool. Rethrows the first exception a chunk threw.
template <class F> void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& fn);

/// True inside a chunk run by parallel_for (nested loops then run serially).
bool in_parallel_region();

namespace detail {
using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);
void parallel_run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, void* ctx);
}  // namespace detail

template <class F> void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& fn) {
  if (end <= begin) return;
  auto call = [](void* ctx, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(ctx))(b, e); };
  detail::parallel_run(begin, end, grain, call, const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace kiln
