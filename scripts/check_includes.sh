#!/usr/bin/env bash
# scripts/check_includes.sh -- keeps the layers of DESIGN.md in order and heavy headers where it
# puts them. A layer includes only itself and the layers above it (runtime, autograd, ir,
# codegen, jit, cuda, distributed, nn, then tools); LLVM's headers only in codegen/llvm/*.cpp,
# CUDA's only in files named *cuda*, Gloo's only in distributed/*.cpp, oneDNN's only in
# runtime/ops/conv_onednn.cpp (and its reference
# benchmark), and none in a public header (the headers kiln/kiln.h reaches). Exits 1 listing
# each offending line.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
report() { echo "check_includes: $1"; bad=1; }

# The layer order: each folder may include the folders listed before it, and itself.
layers=(runtime autograd ir codegen jit cuda distributed nn tools)
for ((i = 0; i < ${#layers[@]}; ++i)); do
  layer="${layers[i]}"
  [[ -d "$layer" ]] || continue
  allowed=("${layers[@]:0:i+1}")
  while IFS= read -r hit; do
    target="$(sed -nE 's/.*#include\s*"([a-z_]+)\/.*/\1/p' <<<"$hit")"
    ok=0
    for a in "${allowed[@]}"; do [[ "$target" == "$a" ]] && ok=1; done
    ((ok)) || report "$layer may not include $target/ (it may include: ${allowed[*]}): $hit"
  done < <(grep -rnE '#include\s*"[a-z_]+/' --include='*.h' --include='*.cpp' --include='*.def' "$layer" || true)
done

while IFS= read -r hit; do
  file="${hit%%:*}"
  [[ "$file" == codegen/llvm/*.cpp ]] || report "LLVM header outside codegen/llvm/*.cpp: $hit"
done < <(grep -rnE '#include\s*[<"](llvm|llvm-c)/' --include='*.h' --include='*.cpp' --include='*.def' \
           runtime autograd ir codegen jit cuda nn tools kiln benchmarks examples tests 2>/dev/null || true)

while IFS= read -r hit; do
  file="${hit%%:*}"
  [[ "$(basename "$file")" == *cuda* ]] || report "CUDA header outside a *cuda* file: $hit"
done < <(grep -rnE '#include\s*[<"](cuda|cuda_runtime|nvrtc|cublas|cudnn|nccl)[^>"/]*\.h' --include='*.h' --include='*.cpp' \
           runtime autograd ir codegen jit cuda distributed nn tools kiln 2>/dev/null || true)

# A header that includes CUDA's (named *_cuda.h) only in files named *cuda* too: any other
# file also builds without the toolkit.
while IFS= read -r hit; do
  file="${hit%%:*}"
  [[ "$(basename "$file")" == *cuda* ]] || report "a *_cuda.h header outside a *cuda* file: $hit"
done < <(grep -rnE '#include\s*"[a-z_/]+_cuda\.h"' --include='*.h' --include='*.cpp' \
           runtime autograd ir codegen jit cuda distributed nn tools kiln benchmarks examples 2>/dev/null || true)

while IFS= read -r hit; do
  file="${hit%%:*}"
  [[ "$file" == runtime/ops/conv_onednn.cpp || "$file" == benchmarks/onednn_bench.cpp ]] ||
    report "oneDNN header outside runtime/ops/conv_onednn.cpp: $hit"
done < <(grep -rnE '#include\s*[<"]oneapi/dnnl/' --include='*.h' --include='*.cpp' \
           runtime autograd ir codegen jit cuda nn tools kiln benchmarks examples tests 2>/dev/null || true)

while IFS= read -r hit; do
  file="${hit%%:*}"
  [[ "$file" == distributed/*.cpp ]] || report "Gloo header outside distributed/*.cpp: $hit"
done < <(grep -rnE '#include\s*[<"]gloo/' --include='*.h' --include='*.cpp' \
           runtime autograd ir codegen jit cuda distributed nn tools kiln benchmarks examples tests 2>/dev/null || true)

# Every header kiln/kiln.h reaches, followed through quoted includes.
declare -A seen
queue=(kiln/kiln.h)
while ((${#queue[@]})); do
  h="${queue[0]}"
  queue=("${queue[@]:1}")
  [[ -n "${seen[$h]:-}" || ! -f "$h" ]] && continue
  seen[$h]=1
  if grep -nE '#include\s*[<"](llvm|llvm-c|cuda[^/"]*\.h|nvrtc|cublas|cudnn|oneapi)' "$h"; then report "public header $h includes LLVM, CUDA or oneDNN"; fi
  while IFS= read -r inc; do queue+=("$inc"); done < <(sed -nE 's/^#include\s*"([^"]+)".*/\1/p' "$h")
done

if ((bad)); then exit 1; fi
echo "check_includes: ok (${#seen[@]} public headers)"
