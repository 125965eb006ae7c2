// benchmarks/copy_limit.cpp -- see copy_limit.h. Compiled for the build machine's instruction
// set (benchmarks/CMakeLists.txt), as STREAM is.
#include "benchmarks/copy_limit.h"

#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "benchmarks/bench_cases.h"
#include "runtime/parallel.h"

namespace kiln::bench {
namespace {

void memcpy_chunks(char* dst, const char* src, int64_t bytes) {
  parallel_for(0, bytes, 1 << 20, [&](int64_t lo, int64_t hi) { std::memcpy(dst + lo, src + lo, hi - lo); });
}

// One contiguous part per thread, a loop the compiler vectorizes (STREAM's copy).
void stream_copy(float* __restrict dst, const float* __restrict src, int64_t n) {
  int64_t parts = num_threads();
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
      for (int64_t i = lo; i < hi; ++i) dst[i] = src[i];
    }
  });
}

}  // namespace

void copy_case(benchmark::State& s, int64_t bytes, bool reads_only) {
  int64_t n = bytes / 4;
  Tensor a = randn({n}), b = empty({n});
  const float* src = static_cast<const float*>(a.data_ptr());
  float* dst = static_cast<float*>(b.data_ptr());
  auto by_memcpy = [&] { memcpy_chunks(reinterpret_cast<char*>(dst), reinterpret_cast<const char*>(src), n * 4); };
  auto by_loop = [&] { stream_copy(dst, src, n); };
  auto best_of = [](auto copy) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      copy();
      benchmark::ClobberMemory();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  by_memcpy();  // first touch: page faults stay out of the timing
  bool loop = best_of(by_loop) < best_of(by_memcpy);
  for (auto _ : s) {
    if (loop) by_loop();
    else by_memcpy();
    benchmark::ClobberMemory();
  }
  count_bytes(s, double(n * 4) * (reads_only ? 1 : 2));
  if (reads_only) s.SetLabel(kReadsOnly);
}

}  // namespace kiln::bench
