#!/usr/bin/env bash
# scripts/fuzz.sh -- builds the libFuzzer targets (tools/fuzz) with clang++-14 in build-fuzz and
# runs each for a while: one per reader of untrusted bytes (IR text: parse, verify; .npy;
# safetensors; disk-cache entries; saved modules; registered ops' schemas), each from its seeds
# (tools/fuzz/corpus* and, for IR, the tests/ir graphs).
#   scripts/fuzz.sh [SECONDS]     seconds per target (default 20)
#   KILN_FUZZ_SEED=N              libFuzzer's seed (default 1, so CI runs repeat)
# The targets live in build-asan (scripts/configure_asan.sh), beside the sanitizer suite, on one
# instrumented library. A crash leaves its input in build-asan/artifacts/ and fails the script;
# replay it with
#   build-asan/tools/fuzz/<target> build-asan/artifacts/<file>
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh
seconds="${1:-20}"
jobs="${KILN_JOBS:-$(nproc)}"
dir=build-asan
targets=(parse_fuzz verify_fuzz npy_fuzz safetensors_fuzz disk_cache_fuzz module_fuzz schema_fuzz)

scripts/configure_asan.sh
stage "fuzz build" ninja -C "$dir" -j "$jobs" "${targets[@]}"
fuzz_start=$SECONDS

mkdir -p "$dir/artifacts" "$dir/repro" "$dir/seeds-golden"
# The golden IR tests make good seeds too: their input graphs, without the EXPECT blocks.
for f in tests/ir/*/*.ir; do
  [[ -e "$f" ]] || continue
  name="${f#tests/ir/}"
  awk '/^\/\/ EXPECT/ { exit } { print }' "$f" >"$dir/seeds-golden/${name//\//_}"
done
# Seeds and options per target: IR text gets the IR seeds and dictionary.
args_for() {
  case "$1" in
    parse_fuzz | verify_fuzz) echo "tools/fuzz/corpus $dir/seeds-golden -dict=tools/fuzz/ir.dict -max_len=4096" ;;
    npy_fuzz) echo "tools/fuzz/corpus-npy -max_len=4096" ;;
    safetensors_fuzz) echo "tools/fuzz/corpus-safetensors -dict=tools/fuzz/safetensors.dict -max_len=4096" ;;
    disk_cache_fuzz) echo "tools/fuzz/corpus-disk-cache -max_len=1024" ;;
    module_fuzz) echo "tests/compat -dict=tools/fuzz/module.dict -max_len=32768" ;;
    schema_fuzz) echo "tools/fuzz/corpus-schema -max_len=1024" ;;
  esac
}
for t in "${targets[@]}"; do
  mkdir -p "$dir/corpus-$t"  # what the runs found, kept between runs; the seeds stay read-only
  echo "fuzz: $t for ${seconds}s"
  # shellcheck disable=SC2046  # args_for's words are meant to split
  KILN_REPRO_DIR="$dir/repro" "$dir/tools/fuzz/$t" "$dir/corpus-$t" $(args_for "$t") \
    -timeout=10 -rss_limit_mb=2048 \
    -max_total_time="$seconds" -seed="${KILN_FUZZ_SEED:-1}" -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/$t-" 2>"$dir/$t.log" || {
    tail -n 60 "$dir/$t.log"
    echo "fuzz: $t failed; the input is in $dir/artifacts/" >&2
    exit 1
  }
  grep -E '^stat::number_of_executed_units|^Done ' "$dir/$t.log" || true
done
[[ -z "${KILN_STAGE_LOG:-}" ]] || printf 'fuzz run\t%d\tok\n' $((SECONDS - fuzz_start)) >>"$KILN_STAGE_LOG"
echo "fuzz: ${#targets[@]} passed, 0 failed"
