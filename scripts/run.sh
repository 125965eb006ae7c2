#!/usr/bin/env bash
# scripts/run.sh -- the README's commands: install what is missing, build, then run.
#   scripts/run.sh demo    Release build, then the main demo: train_digits trains and saves the
#                          model, classify loads it in a fresh process and scores it, then
#                          train_digits again on 2 processes (data-parallel)
#   scripts/run.sh test    the include, format and docs checks, each fuzz target for KILN_FUZZ_SECONDS
#                          (default 20; 0 skips fuzzing), Release build (-O3, line tables),
#                          the link check, then the whole suite (ctest)
#   scripts/run.sh bench   Release build with LibTorch if available, then the benchmark table
#                          (arguments go to kiln_bench, e.g. --benchmark_filter=conv)
#   scripts/run.sh sanitize  the library and the whole suite under AddressSanitizer and
#                          UndefinedBehaviorSanitizer (build-asan), then the concurrency tests
#                          under ThreadSanitizer (build-tsan), then the host CUDA's concurrent
#                          blocks under it (build-tsan-cuda); any report fails the run
#   scripts/run.sh gpu     on a machine with a GPU: Release build with tests and benchmarks,
#                          then the CUDA tests and the op suite's CUDA column on the real
#                          driver, NVRTC, cuBLAS, cuDNN and NCCL, then kiln_cuda_bench
#                          (arguments go to it); without a GPU each says why and skips
#   scripts/run.sh bench --torch-isolation [CASES [BENCHMARK ARGS...]]
#                          LibTorch's cases alone in a process beside LibTorch's after kiln's in
#                          one process (scripts/bench_torch_isolation.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh
what="${1:-test}"
jobs="${KILN_JOBS:-$(nproc)}"

configure_and_build() {  # build_dir build_type [cmake args...]
  local dir="$1" type="$2"
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null
  ninja -C "$dir" -j "$jobs"
}

case "$what" in
  demo)
    scripts/deps.sh
    configure_and_build build-release Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCHMARKS=OFF
    ./build-release/examples/train_digits
    # A second program serves the saved forward without the model's C++ class.
    ./build-release/examples/classify digits_cnn.kiln
    # The same training data-parallel: 2 processes (kiln-run), each on half of every batch.
    ./build-release/tools/kiln-run -n 2 ./build-release/examples/train_digits
    ;;
  test)
    stage deps scripts/deps.sh
    stage "include check" scripts/check_includes.sh
    stage "format check" scripts/check_format.sh
    stage "docs check" python3 scripts/check_docs.py
    # The fuzzers first (a brief run), so ctest's summary of the whole suite is the last line.
    fuzz_seconds="${KILN_FUZZ_SECONDS:-20}"
    if [[ "$fuzz_seconds" != 0 ]]; then scripts/fuzz.sh "$fuzz_seconds"; fi
    # Release (-O3, where optimization-only bugs show) with line tables, so a failure's
    # backtrace names lines: the one optimized build whose suite CI runs.
    stage "test build" configure_and_build build Release -DKILN_WERROR=ON -DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG -g1"
    stage "link check" scripts/check_links.sh build
    # The tests' compiled kernels go to a cache of their own, emptied first, so the suite always
    # exercises the compiler as well as the disk cache (and never touches the user's cache).
    rm -rf build/kernel-cache
    KILN_CACHE_DIR="$PWD/build/kernel-cache" stage suite ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600
    ;;
  sanitize)
    scripts/deps.sh
    scripts/sanitize.sh
    ;;
  bench)
    scripts/deps.sh --bench
    # Benchmarks on explicitly: `run.sh demo` leaves build-release configured without them.
    configure_and_build build-release Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCHMARKS=ON
    # LibTorch runs as its users run it (libgomp's threads spin after each op). On a machine
    # busy with other work that costs it dearly; OMP_WAIT_POLICY=passive shows that case.
    if [[ "${2:-}" == --torch-isolation ]]; then
      scripts/bench_torch_isolation.sh build-release/benchmarks/kiln_bench "${3:-.*}" "${@:4}"
    else
      ./build-release/benchmarks/kiln_bench "${@:2}"
    fi
    ;;
  gpu)
    scripts/deps.sh
    configure_and_build build-gpu Release -DKILN_BUILD_TESTS=ON -DKILN_BUILD_BENCHMARKS=ON -DKILN_CUDA=ON
    # Empty names the real libraries (libcuda.so.1, the toolkit's NVRTC, cuBLAS, cuDNN, NCCL);
    # the test binaries would otherwise point themselves at the host CUDA.
    export KILN_CUDA_DRIVER= KILN_CUDA_NVRTC= KILN_CUDA_CUBLAS= KILN_CUDA_CUBLASLT= KILN_CUDA_CUDNN= KILN_CUDA_NCCL= KILN_CUDA_CUPTI=
    export KILN_CACHE_DIR="$PWD/build-gpu/kernel-cache"
    status=0
    ./build-gpu/tests/kiln_cuda_tests || status=1
    ./build-gpu/tests/kiln_every_op_tests --gtest_filter='*Cuda*' || status=1
    ./build-gpu/benchmarks/kiln_cuda_bench "${@:2}" || status=1
    exit "$status"
    ;;
  *)
    echo "usage: scripts/run.sh demo|test|sanitize|bench|gpu" >&2
    exit 2
    ;;
esac
