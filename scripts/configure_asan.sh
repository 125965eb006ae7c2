#!/usr/bin/env bash
# scripts/configure_asan.sh -- configures build-asan, the one clang-14 build that both the fuzz
# targets (scripts/fuzz.sh) and the AddressSanitizer + UndefinedBehaviorSanitizer suite
# (scripts/sanitize.sh) use, so its library is compiled once. -O1 with line tables only: reports
# name lines, and it compiles in about half the time of full debug info.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DKILN_SANITIZE=address -DKILN_FUZZ=ON -DKILN_WERROR=ON \
  -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_TOOLS=OFF >/dev/null
