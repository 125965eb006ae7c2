#!/usr/bin/env bash
# tests/models/train_cuda.sh BUILD_DIR -- train_model on the host CUDA, as a user runs it on a GPU
# (`--device cuda:0`): the tiny GPT's traced whole step trains, and that step is captured as a
# CUDA graph. A capture the driver refuses (an upload from pageable memory inside it, as a
# slice's zero-padded gradient once was) runs the step without a graph, logged "capture failed".
set -euo pipefail
build="$1"
host="$build/tests/libkiln_host_cuda.so"
out=$(KILN_CUDA_DRIVER=$host KILN_CUDA_NVRTC=$host KILN_CUDA_CUBLAS=$host KILN_CUDA_CUBLASLT=$host \
  KILN_CUDA_CUDNN=$host KILN_LOG=cache "$build/examples/train_model" gpt --size tiny --steps 3 --jit \
  --device cuda:0 2>&1)
grep -v '^\[kiln:cache\] \(kernel\|hit\|miss\|stored\)' <<<"$out"
grep -q 'capture failed' <<<"$out" && { echo "train_cuda.sh: the step was not captured"; exit 1; }
grep -q '@train_step: captured as a CUDA graph' <<<"$out" || { echo "train_cuda.sh: no capture of the step"; exit 1; }
grep -q '^cuda:0: peak .* MB in use' <<<"$out" || { echo "train_cuda.sh: train_model did not finish"; exit 1; }
echo "train_cuda.sh: the tiny GPT trained on cuda:0, its traced step captured as a CUDA graph"
