// runtime/parallel.h -- kiln's thread pool, and the scope that keeps BLAS single-threaded in it.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln {

/// Splits [begin, end) into at most num_threads() contiguous chunks of at least `grain`
/// items and runs fn(chunk_begin, chunk_end) on them in parallel; returns when all are done.
/// Several threads may call it at once: each call's chunks go to the pool's workers, and the
/// calling thread runs chunks of its own call too. Runs inline when the range is small or when
/// called from inside a chunk. Chunks see the caller's grad mode and tracer (Recorder).
/// Rethrows the first exception a chunk threw (the chunks not yet started are skipped).
template <class F> void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& fn);

/// True inside a chunk run by parallel_for (nested loops then run serially).
bool in_parallel_region();

/// While any BlasThreadsScope is alive, on any thread, OpenBLAS runs single-threaded. kiln calls
/// BLAS from inside its own chunks (matmul, conv2d), where BLAS threads of its own would
/// oversubscribe the cores. OpenBLAS 0.3.21 has only a process-wide thread count, so the scopes
/// are counted across threads: the first one in saves openblas_get_num_threads() and sets 1, the
/// last one out sets the saved count back (unless the count is no longer 1, i.e. someone else
/// set one meanwhile). Outside kiln's BLAS work the count is whatever the program chose; while a
/// scope is open, another library's BLAS calls in the same process are single-threaded too.
class BlasThreadsScope {
 public:
  BlasThreadsScope();
  ~BlasThreadsScope();
  BlasThreadsScope(const BlasThreadsScope&) = delete;
  BlasThreadsScope& operator=(const BlasThreadsScope&) = delete;
};

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
