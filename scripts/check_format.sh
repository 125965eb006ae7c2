#!/usr/bin/env bash
# scripts/check_format.sh [BASE] -- every C++ line changed since BASE (committed or not) is as
# .clang-format says, by Debian's clang-format (git clang-format). BASE is by default the last
# commit that changed .clang-format, which formatted the whole tree with it: a change of style
# reformats the tree in the same commit, and later lines are checked against it. Two headers are
# left as they were: tests/cuda/host/emulation_cuda.h and abi_cuda.h, whose text keys the host
# NVRTC's compiled kernels (reformatting them would make every CI run compile those afresh).
# Exits 1 with the diff that would fix it; `git clang-format BASE` applies it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v git-clang-format >/dev/null || { echo "check_format: git-clang-format is missing (Debian's clang-format)" >&2; exit 2; }
if [[ "$(git rev-parse --is-shallow-repository)" == true ]]; then
  echo "check_format: a shallow clone may not hold the commit that formatted the tree; fetch its history" >&2
  exit 2
fi
base="${1:-$(git log -1 --format=%H -- .clang-format)}"
[[ -n "$base" ]] || { echo "check_format: no commit has a .clang-format yet" >&2; exit 2; }
out="$(git clang-format --diff --extensions cpp,h "$base" -- . \
       ':(exclude)tests/cuda/host/emulation_cuda.h' ':(exclude)tests/cuda/host/abi_cuda.h' 2>&1)" || true
if [[ -z "$out" || "$out" == "no modified files to format" || "$out" == *"did not modify any files"* ]]; then
  echo "check_format: ok (lines changed since ${base:0:12})"
  exit 0
fi
echo "$out"
echo "check_format: the lines above are not as .clang-format says; run: git clang-format ${base:0:12}"
exit 1
