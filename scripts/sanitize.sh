#!/usr/bin/env bash
# scripts/sanitize.sh -- the suite under clang's sanitizers (scripts/run.sh sanitize; CI runs it
# after the normal suite). Any sanitizer report fails the run.
#   1. build-asan: the library and every test with AddressSanitizer + UndefinedBehaviorSanitizer,
#      then the whole suite (the random-program tests with a smaller count, for time).
#   2. build-tsan: the library and the unit and jit tests with ThreadSanitizer, then the tests
#      that run threads: the jit cache from 8 threads, the pool, the disk cache, the allocator,
#      the generator, the profiler and 8 threads training at once.
# Debug builds at -O1 (as the fuzzers), so reports have lines and the run stays quick.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-$(nproc)}"
flags=(-G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g"
  -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_TOOLS=OFF)

# ---- AddressSanitizer + UndefinedBehaviorSanitizer: the whole suite ---------------------------
cmake -S . -B build-asan "${flags[@]}" -DKILN_SANITIZE=address >/dev/null
ninja -C build-asan -j "$jobs"
rm -rf build-asan/kernel-cache
# detect_leaks: kiln keeps a few process-wide caches on purpose (never freed, still reachable).
# allocator_may_return_null: an impossible size is an OutOfMemory error (tested), not an abort.
# The downstream-install test builds a project of its own without the sanitizer runtime.
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:allocator_may_return_null=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  KILN_DIFF_PROGRAMS="${KILN_SANITIZE_DIFF_PROGRAMS:-60}" \
  KILN_CACHE_DIR="$PWD/build-asan/kernel-cache" \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -E '^install_and_build_downstream$'

# ---- ThreadSanitizer: the tests that run threads -------------------------------------------
cmake -S . -B build-tsan "${flags[@]}" -DKILN_SANITIZE=thread >/dev/null
ninja -C build-tsan -j "$jobs" kiln_unit_tests kiln_jit_tests
rm -rf build-tsan/kernel-cache
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$PWD/scripts/tsan.supp"
export KILN_CACHE_DIR="$PWD/build-tsan/kernel-cache"
# OpenBLAS's own threads synchronize in ways TSan cannot see; kiln runs it single-threaded inside
# its pool anyway (runtime/parallel.cpp), so keep it from starting any.
export OPENBLAS_NUM_THREADS=1
build-tsan/tests/kiln_unit_tests --gtest_filter='Parallel*:Allocator*:Random.*Concurrent*:Random.DrawsDoNotDependOnTheThreadCount'
build-tsan/tests/kiln_jit_tests --gtest_filter='Cache.*:DiskCache*:Threads.*:Profiler*'
echo "sanitize: ASan + UBSan suite and TSan concurrency tests passed"
