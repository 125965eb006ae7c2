#!/usr/bin/env bash
# scripts/deps.sh -- installs the Debian 12 packages kiln needs that are missing (run as root).
# The one list of kiln's dependencies. Pass --bench to add LibTorch for the comparison columns.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config ccache
  libfmt-dev             # message formatting
  libgtest-dev           # tests
  libbenchmark-dev       # benchmarks/
  libopenblas-dev        # matmul, conv2d
  libsleef-dev           # vectorized transcendentals
  llvm-19-dev            # the JIT's CPU code generator (codegen/llvm)
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(libtorch-dev)  # optional: LibTorch beside kiln in benchmarks/
fi

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
