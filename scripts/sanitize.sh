#!/usr/bin/env bash
# scripts/sanitize.sh -- the suite under clang's sanitizers (scripts/run.sh sanitize; CI runs it
# after the normal suite). Any sanitizer report fails the run.
#   1. build-asan: the library and every test with AddressSanitizer + UndefinedBehaviorSanitizer,
#      then the whole suite (the random-program tests with a smaller count, for time).
#   2. build-tsan: the library with ThreadSanitizer and the tests that run threads (the jit
#      cache from 8 threads, the pool, the disk cache, the allocator, the generator, the
#      profiler, 8 threads training at once), built alone as kiln_tsan_tests, then run. It is
#      built without CUDA (none of these tests uses it): the one build, by clang 14, of the
#      stand-ins a machine without the toolkit gets (runtime/cuda/unavailable.cpp and the
#      others), so they compile, link and run in CI although its machine has the toolkit.
#   3. build-tsan-cuda: the CUDA tests whose kernels' blocks meet, on the host CUDA with 4
#      workers, their kernels instrumented too, and two planted races that must be reported.
# Debug builds at -O1, so reports have lines and the run stays quick.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh
jobs="${KILN_JOBS:-$(nproc)}"

# ---- AddressSanitizer + UndefinedBehaviorSanitizer: the whole suite ---------------------------
scripts/configure_asan.sh  # shared with the fuzz targets: one instrumented library
stage "asan build" ninja -C build-asan -j "$jobs"
rm -rf build-asan/kernel-cache
# detect_leaks: kiln keeps a few process-wide caches on purpose (never freed, still reachable).
# allocator_may_return_null: an impossible size is an OutOfMemory error (tested), not an abort.
# Left out: the downstream-install test (it builds a project of its own, without the sanitizer
# runtime) and the op suite's reruns at lower instruction sets (the same code as the run above).
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:allocator_may_return_null=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  KILN_DIFF_PROGRAMS="${KILN_SANITIZE_DIFF_PROGRAMS:-60}" \
  KILN_CACHE_DIR="$PWD/build-asan/kernel-cache" \
  stage "asan suite" ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 \
  -E '^(install_and_build_downstream|kiln_op_tests_isa_.*)$'

# ---- ThreadSanitizer: the tests that run threads -------------------------------------------
# Built file by file (KILN_UNITY_BUILD=OFF, cmake/unity.cmake): the one tree where each library
# file compiles with its own includes alone.
cmake -S . -B build-tsan -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DKILN_SANITIZE=thread -DKILN_WERROR=ON -DKILN_CUDA=OFF \
  -DKILN_UNITY_BUILD=OFF \
  -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_TOOLS=OFF >/dev/null
stage "tsan build" ninja -C build-tsan -j "$jobs" kiln_tsan_tests  # those tests alone (tests/CMakeLists.txt)
# The layers by symbol in the build without CUDA too, whose stand-ins must define what the
# CUDA layer's other files call.
stage "tsan link check" scripts/check_links.sh build-tsan
rm -rf build-tsan/kernel-cache
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$PWD/scripts/tsan.supp"
export KILN_CACHE_DIR="$PWD/build-tsan/kernel-cache"
# OpenBLAS's own threads synchronize in ways TSan cannot see; kiln runs it single-threaded inside
# its pool anyway (runtime/parallel.cpp), so keep it from starting any.
export OPENBLAS_NUM_THREADS=1
stage "tsan run" build-tsan/tests/kiln_tsan_tests

# ---- ThreadSanitizer over the host CUDA: races between a kernel's blocks ----------------------
# A third tree, with CUDA and only its tests. Its host NVRTC compiles the kernels with TSan too
# (tests/cuda/host/nvrtc_cuda.cpp), and each launch's blocks run on 4 OS threads (ctest
# cuda_concurrent_blocks: the reductions, attention and the sorts), so a protocol between
# blocks that lacks an order (a wait, an acquire, a fence) is reported even where its results
# come out right. The planted races (cuda_planted_race_*) pass only when TSan reports them.
cmake -S . -B build-tsan-cuda -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DKILN_SANITIZE=thread -DKILN_WERROR=ON -DKILN_CUDA=ON \
  -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_TOOLS=OFF >/dev/null
stage "tsan cuda build" ninja -C build-tsan-cuda -j "$jobs" kiln_cuda_tests kiln_host_cuda
rm -rf build-tsan-cuda/kernel-cache build-tsan-cuda/modules
mkdir build-tsan-cuda/modules
# The modules are kept where a report's symbolizer can read the kernel's name and lines.
KILN_CACHE_DIR="$PWD/build-tsan-cuda/kernel-cache" KILN_HOST_CUDA_MODULE_DIR="$PWD/build-tsan-cuda/modules" \
  stage "tsan cuda run" ctest --test-dir build-tsan-cuda --output-on-failure -j "$jobs" --timeout 1200 \
  -R '^cuda_(concurrent_blocks|planted_race_.*)$'
rm -rf build-tsan-cuda/modules
echo "sanitize: ASan + UBSan suite, TSan concurrency tests and TSan over the host CUDA's blocks passed"
