#!/usr/bin/env bash
# scripts/bench_ab.sh -- two builds' benchmark binaries, alternated run by run on a noisy
# machine, with each case's median and spread per build: how "no slower than before" is measured.
#
#   scripts/bench_ab.sh BEFORE_DIR AFTER_DIR [RUNS [FILTER]]
#
# Each DIR holds a kiln_bench and the libkiln.so it was built with (copy build-release's
# benchmarks/kiln_bench and libkiln.so* into a folder before changing the code). RUNS defaults
# to 5; FILTER (a Google Benchmark regex) to the dispatch cases: a 1-element add and multiply,
# and a cached traced call beside its eager twin.
set -euo pipefail
before="${1:?usage: scripts/bench_ab.sh BEFORE_DIR AFTER_DIR [RUNS [FILTER]]}"
after="${2:?usage: scripts/bench_ab.sh BEFORE_DIR AFTER_DIR [RUNS [FILTER]]}"
runs="${3:-5}"
filter="${4:-add_tiny.1./kiln/1$|mul_scalar_tiny.1./kiln/1$|call_cached.1./(jit|kiln)$}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for ((i = 0; i < runs; ++i)); do
  for side in before after; do
    dir="$before"
    [[ "$side" == after ]] && dir="$after"
    # The table kiln_bench prints last: one row per case, a time per impl column.
    LD_LIBRARY_PATH="$dir" "$dir/kiln_bench" --benchmark_filter="$filter" --benchmark_min_time=0.3 \
        --benchmark_color=false 2>&1 | sed -n '/^case /,/^$/p' | sed "s/^/$side /" >>"$out"
  done
done
python3 - "$out" <<'EOF'
import collections, re, statistics, sys
times = collections.defaultdict(list)
impls = ["kiln", "kiln_op", "jit_bwd", "jit", "torch", "torch_op", "onednn"]
unit = {"ns": 1, "us": 1e3, "ms": 1e6}
for line in open(sys.argv[1]):
    side, rest = line.split(" ", 1)
    if rest.startswith("case") or not rest.strip():
        continue
    name = rest.split()[0]
    cols = re.findall(r"(\d+(?:\.\d+)? (?:ns|us|ms)|(?<= )-(?= ))", rest[len(name):])
    for impl, col in zip(impls, cols):
        if col != "-":
            value, u = col.split()
            times[(f"{name}/{impl}", side)].append(float(value) * unit[u])
for case in sorted({c for c, _ in times}):
    b, a = times[(case, "before")], times[(case, "after")]
    if not b or not a:
        continue
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"{case:28s} before {mb:9.1f} ns [{min(b):.0f}-{max(b):.0f}]  after {ma:9.1f} ns "
          f"[{min(a):.0f}-{max(a):.0f}]  after/before {ma / mb:.3f}  ({len(b)} runs each)")
EOF
