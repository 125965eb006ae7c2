#!/usr/bin/env bash
# scripts/build_matrix.sh -- the build configurations users make that the test command (g++,
# RelWithDebInfo, Ninja) and the sanitizer builds (clang-14, Debug at -O1) do not, each built
# with warnings as errors (KILN_WERROR), so a new warning anywhere fails here before it can
# fail a user who turned -Werror on.
#
#   scripts/build_matrix.sh        every configuration (about 40 minutes on 2 cores, ccache cold):
#                                  g++ 12: Release and Debug with Ninja, RelWithDebInfo with Unix
#                                  Makefiles; clang 14: Release, RelWithDebInfo and Debug; each
#                                  with the tests, benchmarks, examples and tools; then the
#                                  library alone, installed, and a find_package(kiln) program
#                                  built and run against the install (g++ with CUDA, clang 14
#                                  without: the build a machine without the toolkit makes)
#
# Build folders are build-matrix/<name>; a line per configuration says what built.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-$(nproc)}"
[[ $# == 0 ]] || { echo "usage: scripts/build_matrix.sh (CI covers the -O3 suite, the install and the no-CUDA clang build: .ci/run)" >&2; exit 2; }
scripts/deps.sh
# The configurations compile the same files with the same flags in different folders: with
# the folder left out of ccache's key, objects with debug info are shared between them too.
export CCACHE_NOHASHDIR=1

# build NAME GENERATOR COMPILER TYPE [CMAKE ARGS...]
build() {
  local name="$1" gen="$2" cxx="$3" type="$4"
  shift 4
  local dir="build-matrix/$name" start=$SECONDS
  cmake -S . -B "$dir" -G "$gen" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$type" -DKILN_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" >"$dir.log" 2>&1 || { tail -40 "$dir.log"; echo "build_matrix: $name FAILED (log: $dir.log)"; exit 1; }
  echo "build_matrix: $name built ($gen, $cxx, $type${*:+, $*}) in $((SECONDS - start)) s"
}

# installed NAME COMPILER [CMAKE ARGS...]: the library alone (no tests, no benchmarks),
# installed into a prefix, then tests/downstream configured with find_package(kiln), built and
# run.
installed() {
  local name="$1" cxx="$2" dir="build-matrix/$1"
  shift 2
  build "$name" "Unix Makefiles" "$cxx" Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCHMARKS=OFF "$@"
  rm -rf "$dir/prefix" "$dir/downstream"
  cmake --install "$dir" --prefix "$dir/prefix" >/dev/null
  cmake -S tests/downstream -B "$dir/downstream" -G "Unix Makefiles" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_PREFIX_PATH="$PWD/$dir/prefix" >/dev/null
  cmake --build "$dir/downstream" >/dev/null
  "$dir/downstream/downstream" >/dev/null
  echo "build_matrix: $name installed, and a find_package(kiln) program built against it runs"
}

build gcc-release Ninja g++ Release
build gcc-debug Ninja g++ Debug
build gcc-relwithdebinfo-make "Unix Makefiles" g++ RelWithDebInfo
build clang-release Ninja clang++-14 Release
build clang-relwithdebinfo Ninja clang++-14 RelWithDebInfo
build clang-debug Ninja clang++-14 Debug
installed gcc-installed g++
installed clang-installed-nocuda clang++-14 -DKILN_CUDA=OFF
echo "build_matrix: every configuration built"
