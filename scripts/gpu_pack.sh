#!/usr/bin/env bash
# scripts/gpu_pack.sh -- the on-device suite for a GPU machine that cannot build kiln (no Debian
# packages, no network: the lent machines' image has the driver, the CUDA 13 libraries and
# PyTorch, but not LLVM, oneDNN or OpenBLAS).
#
#   scripts/gpu_pack.sh pack [BUILD]   here: BUILD's (default build/) CUDA tests, op suite and
#                                      kiln_cuda_bench, with every library they load that is not
#                                      glibc's or libstdc++'s, stripped, in .gpu/kiln.tar.xz
#   scripts/gpu_pack.sh run OUT [tests|models|profile]
#                                      there: unpacks it, finds the CUDA libraries (the toolkit's
#                                      or pip's nvidia-* wheels'), runs what scripts/run.sh gpu
#                                      runs plus benchmarks/torch_cuda_peer.py (with "tests", the
#                                      tests alone), logs under OUT. With "models": the example
#                                      models' full-size training steps in kiln_cuda_bench and in
#                                      PyTorch (eager and traced / torch.compile; KILN_GPU_MODELS
#                                      and KILN_GPU_MODEL_VARIANTS, e.g. eager_tf32,traced_bf16,
#                                      choose), then the table side by side in OUT/models.md.
#                                      With "profile": the same models' steps, eager and traced,
#                                      kernel by kernel under kiln's profiler (kiln_cuda_profile)
#                                      and torch.profiler (torch_cuda_peer.py --profile), side by
#                                      side with the cost model's bounds in OUT/profile.md; each
#                                      side stops at KILN_GPU_PROFILE_TIMEOUT (110 s) and keeps the
#                                      rows it finished, so models then profile fit one call
#
# KILN_GPU_HOST_CUDA=path/libkiln_host_cuda.so runs `run` on this machine's host CUDA instead
# of a GPU's libraries (KILN_GPU_PROFILE_SIZE=tiny keeps the emulated steps short): the check
# that the whole script works before a GPU is lent.
#
# .gpu/ is ignored (.git/info/exclude), carried with the run: the pack is about 56 MB xz.
set -uo pipefail
cd "$(dirname "$0")/.."

pack() {
  local build=${1:-build} dir
  dir=$(mktemp -d)
  mkdir -p "$dir/bin" "$dir/lib" .gpu
  cp "$build/tests/kiln_cuda_tests" "$build/tests/kiln_every_op_tests" "$build/benchmarks/kiln_cuda_bench" \
    "$build/benchmarks/kiln_cuda_profile" "$dir/bin/"
  ldd "$dir"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  strip --strip-unneeded "$dir"/bin/* "$dir"/lib/*
  tar -C "$dir" -cf - bin lib | xz -T0 -8 >.gpu/kiln.tar.xz
  rm -rf "$dir"
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  ls -la .gpu/kiln.tar.xz
}

# The directory of the first file named $1 under the usual CUDA places.
lib_dir() {
  find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/cuda*/extras/CUPTI/lib64 /usr/local/nvidia/lib64 \
    /usr/lib/x86_64-linux-gnu /opt /usr/local/lib -name "$1" 2>/dev/null | head -1 | xargs -r dirname
}

run() {
  local out=$1 k=/tmp/kiln-gpu status=0
  mkdir -p "$out" "$k"
  tar -C "$k" -xJf .gpu/kiln.tar.xz || return 1
  local path="$k/lib" host=${KILN_GPU_HOST_CUDA:-}
  for so in libcuda.so.1 libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libcupti.so.13; do
    [[ -n $host ]] && break
    local d
    d=$(lib_dir "$so")
    echo "$so: ${d:-NOT FOUND}"
    [[ -n $d ]] && path="$path:$d"
  done
  export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Empty names the real libraries (as scripts/run.sh gpu); the host CUDA's names its library.
  local v
  for v in DRIVER NVRTC CUBLAS CUBLASLT CUDNN NCCL CUPTI; do export "KILN_CUDA_$v=$host"; done
  export KILN_CACHE_DIR="$k/kernel-cache"
  { uname -r; grep PRETTY /etc/os-release; } >"$out/env.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$out/env.txt"
  ldd "$k"/bin/kiln_cuda_tests | grep -i "not found" | tee -a "$out/env.txt"
  if [[ ${2:-} == profile ]]; then  # each model's steps kernel by kernel, kiln beside PyTorch
    local models=${KILN_GPU_MODELS:-alexnet,vgg19_bn,resnet50,mobilenet_v2,gnmt,ncf,gpt} limit=${KILN_GPU_PROFILE_TIMEOUT:-110}
    # The cost model's bounds are for the device nvidia-smi names (an H200 when it names none known).
    local peak
    peak=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -oE 'A100|H100|H200' | head -1)
    rm -f "$out/kiln_profile.jsonl" "$out/torch_profile.jsonl"
    timeout "$limit" "$k/bin/kiln_cuda_profile" --models "$models" --size "${KILN_GPU_PROFILE_SIZE:-full}" \
      --peak "${peak:-H200}" --json "$out/kiln_profile.jsonl" 2>&1 | tee "$out/kiln_profile.log" || status=1
    PYTHONUNBUFFERED=1 timeout "$limit" python3 benchmarks/torch_cuda_peer.py --profile --models "$models" \
      --json "$out/torch_profile.jsonl" 2>&1 | tee "$out/torch_profile.log"
    python3 benchmarks/compare_cuda_profiles.py "$out/kiln_profile.jsonl" "$out/torch_profile.jsonl" >"$out/profile.md" ||
      status=1
    echo "profile: $(grep -c . "$out/kiln_profile.jsonl" 2>/dev/null || echo 0) kiln rows, $(grep -c . \
      "$out/torch_profile.jsonl" 2>/dev/null || echo 0) PyTorch rows in $out/profile.md"
    return "$status"
  fi
  if [[ ${2:-} == models ]]; then  # the example models' steps, kiln beside PyTorch, and the table
    local models=${KILN_GPU_MODELS:-alexnet,vgg19_bn,resnet50,mobilenet_v2,gnmt,ncf,gpt}
    local variants=${KILN_GPU_MODEL_VARIANTS:-eager,traced}
    timeout "${KILN_GPU_MODELS_TIMEOUT:-280}" "$k/bin/kiln_cuda_bench" \
      --benchmark_filter="cuda/model/(${models//,/|})/(${variants//,/|})\$" \
      --benchmark_out="$out/kiln_models.json" --benchmark_out_format=json 2>&1 | tee "$out/kiln_models.log" || status=1
    PYTHONUNBUFFERED=1 timeout "${KILN_GPU_MODELS_TIMEOUT:-280}" python3 benchmarks/torch_cuda_peer.py \
      --models "$models" --variants "${variants//traced/compile}" --json "$out/torch_models.json" 2>&1 |
      tee "$out/torch_models.log" || status=1
    python3 benchmarks/compare_cuda_models.py "$out/kiln_models.json" "$out/torch_models.json" | tee "$out/models.md"
    return "$status"
  fi
  # The tests that fill the device (CudaLibraryMemory) run alone, after the others.
  (
    timeout 180 "$k/bin/kiln_cuda_tests" --gtest_filter='-CudaLibraryMemory.*' >"$out/cuda_tests.log" 2>&1
    echo "kiln_cuda_tests exit $?" >>"$out/cuda_tests.log"
  ) &
  for i in 0 1 2 3; do
    (
      GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 180 "$k/bin/kiln_every_op_tests" --gtest_filter='*Cuda*' \
        >"$out/every_op.$i.log" 2>&1
      echo "kiln_every_op_tests shard $i exit $?" >>"$out/every_op.$i.log"
    ) &
  done
  wait
  timeout 60 "$k/bin/kiln_cuda_tests" --gtest_filter='CudaLibraryMemory.*' >"$out/cuda_full_device.log" 2>&1
  echo "kiln_cuda_tests (a full device) exit $?" >>"$out/cuda_full_device.log"
  cat "$out"/every_op.*.log >"$out/every_op.log" && rm "$out"/every_op.*.log
  grep -hE "^\[  (PASSED|SKIPPED) +\] [0-9]+ test|^\[  FAILED  \] .*\(|exit [0-9]+$" "$out/cuda_tests.log" \
    "$out/cuda_full_device.log" "$out/every_op.log"
  grep -q "exit 0$" "$out/cuda_tests.log" || status=1
  grep -q "exit 0$" "$out/cuda_full_device.log" || status=1
  [[ $(grep -c "exit 0$" "$out/every_op.log") == 4 ]] || status=1
  KILN_LOG=cuda "$k/bin/kiln_cuda_tests" --gtest_filter='CudaConv.*' 2>&1 | grep -E "kiln:cuda|OK|FAILED" | sort | uniq -c
  if [[ ${2:-} != tests ]]; then
    timeout "${KILN_GPU_BENCH_TIMEOUT:-120}" "$k/bin/kiln_cuda_bench" --benchmark_min_time=0.3 \
      --benchmark_filter=-cuda/model/ 2>&1 | tee "$out/bench.log" || status=1
    PYTHONUNBUFFERED=1 timeout 75 python3 benchmarks/torch_cuda_peer.py --min-time 0.3 2>&1 | tee "$out/torch_peer.log" || status=1
  fi
  # After the benchmarks: its 8 processes load the host, and the training steps are host-bound.
  # KILN_GPU_DIFF_PROGRAMS=N: the CUDA differential test on N random programs, in 8 processes.
  local n=${KILN_GPU_DIFF_PROGRAMS:-0}
  if ((n > 0)); then
    for i in 0 1 2 3 4 5 6 7; do
      KILN_CUDA_DIFF_PROGRAMS=$((n / 8)) KILN_CUDA_DIFF_SEED=$((i * (n / 8))) timeout 200 "$k/bin/kiln_cuda_tests" \
        --gtest_filter='CudaDifferential.*' >"$out/diff.$i.log" 2>&1 &
    done
    wait
    cat "$out"/diff.*.log >"$out/differential.log" && rm "$out"/diff.*.log
    grep -E "^cuda: [0-9]+ of" "$out/differential.log" || status=1
    grep -q "FAILED" "$out/differential.log" && status=1
  fi
  return "$status"
}

case "${1:-}" in
  pack) pack "${2:-build}" ;;
  run) run "${2:?usage: scripts/gpu_pack.sh run OUT [tests|models|profile]}" "${3:-}" ;;
  *)
    echo "usage: scripts/gpu_pack.sh pack [BUILD] | run OUT [tests|models|profile]" >&2
    exit 2
    ;;
esac
