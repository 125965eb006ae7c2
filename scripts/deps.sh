#!/usr/bin/env bash
# scripts/deps.sh -- installs the Debian 12 packages kiln needs that are missing (run as root).
# The one list of kiln's dependencies; --bench adds LibTorch for the benchmarks' comparison
# columns.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config ccache
  libfmt-dev             # message formatting
  libgtest-dev           # tests
  libbenchmark-dev       # benchmarks/
  libopenblas-dev        # matmul, conv2d (f64)
  libdnnl-dev            # conv2d (f32): oneDNN
  ocl-icd-opencl-dev     # oneDNN's CMake package requires OpenCL (Debian's libdnnl-dev only
                         # recommends it, and this script installs without recommends)
  libsleef-dev           # vectorized transcendentals
  nlohmann-json3-dev     # safetensors headers
  zlib1g-dev             # the demo reads its gzipped CSV
  llvm-19-dev            # the JIT's CPU code generator (codegen/llvm)
  libxxhash-dev          # the kernel caches' keys and the disk cache's checksums
  libcli11-dev           # kiln-ir's command line (tools/)
  libdlpack-dev          # to_dlpack / from_dlpack: tensors shared with other libraries
  libgloo-dev            # distributed/: collectives across processes (PyTorch's CPU engine)
  clang-14 libclang-rt-14-dev  # libFuzzer and the sanitizers for scripts/fuzz.sh (tools/fuzz)
  clang-format           # scripts/check_format.sh: changed lines as .clang-format says
  python3 binutils       # scripts/check_docs.py; nm and c++filt for scripts/check_links.sh
  python3-sklearn        # ships digits.csv.gz, which examples/train_digits (the demo) and the
                         # two-host test (tests/distributed/two_hosts.sh) train on
  iproute2               # the two-host test's network namespaces (ip netns)
)
case "${1:-}" in
  "") ;;
  --bench) packages+=(libtorch-dev) ;;  # LibTorch beside kiln in benchmarks/
  *) echo "usage: scripts/deps.sh [--bench]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "kiln: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
