#!/usr/bin/env bash
# scripts/bench_torch_isolation.sh -- LibTorch's cases timed twice: alone in a process, and after
# kiln's cases in one process (kiln's pool then idle), side by side. The two columns should agree
# within noise; a case slower after kiln means kiln leaves something behind that LibTorch pays.
#   scripts/bench_torch_isolation.sh [BINARY] [CASES] [BENCHMARK ARGS...]
# BINARY: default build-release/benchmarks/kiln_bench. CASES: a regex on case names (default:
# all), e.g. 'matmul|conv3x3_64x56x56|train_step'; Google Benchmark's POSIX regex takes no \[.
# BENCHMARK ARGS go to both runs: with --benchmark_repetitions=N the medians are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build-release/benchmarks/kiln_bench}"
cases="${2:-.*}"
extra=("${@:3}")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() {  # filter json
  local log="$tmp/log"
  if ! "$bin" --benchmark_filter="$1" --benchmark_out="$2" --benchmark_out_format=json "${extra[@]}" \
      >/dev/null 2>"$log"; then
    cat "$tmp/log" >&2
    exit 1
  fi
}
# Each case's time as "<case>/<impl> <ns>", Google Benchmark's suffixes dropped: its median
# over repetitions, else its one run. The JSON has one field per line (the CSV writer refuses
# runs whose counters differ).
rows() {
  awk -F': ' '
    /^      "name"/ {
      gsub(/[",]/, "", $2); sub(/_(mean|median|stddev|cv)$/, "", $2)  # an aggregate: its run
      split($2, p, "/"); name = p[1] "/" p[2]; kind = "run"
    }
    /^      "run_type"/ && $2 ~ /aggregate/ { kind = "" }
    /^      "aggregate_name"/ && $2 ~ /"median"/ { kind = "median" }
    /^      "error_occurred"/ { kind = "" }
    /^      "real_time"/ { gsub(/,/, "", $2); t = $2 }
    /^      "time_unit"/ && kind != "" {
      f = $2 ~ /"us"/ ? 1e3 : $2 ~ /"ms"/ ? 1e6 : $2 ~ /"s"/ ? 1e9 : 1
      if (!(name in ns)) order[n++] = name
      if (kind == "median" || !(name in median)) ns[name] = t * f
      if (kind == "median") median[name] = 1
    }
    END { for (i = 0; i < n; ++i) print order[i], ns[order[i]] }' "$1"
}

echo "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset, so LibTorch spins between its OpenMP loops}" >&2
echo "LibTorch alone ..." >&2
run "($cases)[^/]*/torch" "$tmp/alone.json"
echo "kiln's cases, then LibTorch's, in one process ..." >&2
run "($cases)[^/]*/" "$tmp/shared.json"
rows "$tmp/alone.json" >"$tmp/alone.txt"
rows "$tmp/shared.json" >"$tmp/shared.txt"

awk '
  function t(ns) {
    return ns >= 1e6 ? sprintf("%.2f ms", ns / 1e6) : ns >= 1e3 ? sprintf("%.2f us", ns / 1e3) : sprintf("%.0f ns", ns)
  }
  NR == FNR { alone[$1] = $2; next }
  $1 ~ /\/torch/ && ($1 in alone) {
    if (!n++) printf "%-44s %12s %14s %8s\n", "LibTorch case", "alone", "after kiln", "ratio"
    r = $2 / alone[$1]; logs += log(r)
    printf "%-44s %12s %14s %8.2f\n", $1, t(alone[$1]), t($2), r
  }
  END {
    if (!n) { print "no LibTorch case matched (is the binary built with LibTorch?)"; exit 1 }
    printf "\n%d cases; geometric mean of after kiln / alone: %.3f (1 = no interference)\n", n, exp(logs / n)
  }' "$tmp/alone.txt" "$tmp/shared.txt"
