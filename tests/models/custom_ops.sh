#!/usr/bin/env bash
# tests/models/custom_ops.sh BUILD_DIR -- examples/custom_ops as a user runs it: the registered
# rotary op checked against its reference and by finite differences, the example GPT trained
# with it and the straight-through estimator in a traced whole step, its forward saved; then
# served by a second process that registers the op (the same logits), and refused by name by
# one that does not. Where kiln has CUDA, the same on the host CUDA: the op's own CUDA kernel.
set -euo pipefail
build="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
run() {  # log, then the example's arguments
  local log="$1"
  shift
  "$build/examples/custom_ops" "$@" | tee "$log"
}
check_served() {  # the trained program's log, the file
  run "$dir/serve.log" serve "$2"
  # The same up to rounding: a forward trained on CUDA is served on the CPU.
  want=$(awk '/^logits checksum/ {print $3}' "$1")
  got=$(awk '/^logits checksum/ {print $3}' "$dir/serve.log")
  awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3 * (1 + (a < 0 ? -a : a))) }' ||
    { echo "the served forward differs: checksum $got, expected $want"; exit 1; }
  run "$dir/refused.log" serve "$2" --without-rotary
  grep -q "^refused: jit::load: .*mylib::rotary, which this program has not registered" "$dir/refused.log" ||
    { echo "a program without the op was not refused by name"; exit 1; }
}
run "$dir/train.log" --steps 30 --save "$dir/gpt.kiln"
grep -q 'runs mylib::rotary' "$dir/train.log"
check_served "$dir/train.log" "$dir/gpt.kiln"
host="$build/tests/libkiln_host_cuda.so"
if [[ -e "$host" ]]; then
  KILN_CUDA_DRIVER=$host KILN_CUDA_NVRTC=$host KILN_CUDA_CUBLAS=$host KILN_CUDA_CUBLASLT=$host KILN_CUDA_CUDNN=$host \
    run "$dir/train_cuda.log" --device cuda:0 --steps 3 --save "$dir/gpt_cuda.kiln"
  grep -q '^rotary on cuda:0 (interleaved=1): kernel = reference' "$dir/train_cuda.log"
  check_served "$dir/train_cuda.log" "$dir/gpt_cuda.kiln"
fi
echo "custom_ops.sh: checked, trained, saved, served where registered and refused where not"
