#!/usr/bin/env bash
# tests/models/profile_cuda.sh BUILD_DIR -- kiln_cuda_profile on the host CUDA, as
# scripts/gpu_pack.sh run OUT profile runs it on a GPU: the tiny NCF's and GPT's steps, eager
# and traced, each a row with its device timeline (CUPTI's records, kiln's names), its launches
# and the cost model's bounds; then compare_cuda_profiles.py's tables from the rows.
set -euo pipefail
build="$1"
src="$(cd "$(dirname "$0")/../.." && pwd)"
host="$build/tests/libkiln_host_cuda.so"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for v in DRIVER NVRTC CUBLAS CUBLASLT CUDNN NCCL CUPTI; do export "KILN_CUDA_$v=$host"; done
export KILN_CACHE_DIR="$out/cache"
"$build/benchmarks/kiln_cuda_profile" --models ncf,gpt --size tiny --steps 2 --warmup 1 --top 10 \
  --json "$out/kiln.jsonl"
python3 - "$out/kiln.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [(r["model"], r["variant"]) for r in rows] == [("ncf", "eager"), ("ncf", "traced"), ("gpt", "eager"),
                                                      ("gpt", "traced")], rows
for r in rows:
    where = f'{r["model"]}/{r["variant"]}'
    assert r["missing"] == "", f'{where}: no device timeline: {r["missing"]}'
    assert 0 < r["device_busy_ms"] <= r["wall_ms"], where
    assert r["device_kernels"] >= r["kiln_launches"] > 0, where
    assert r["plan_bound_ms"] > 0 and r["eager_floor_ms"] > 0 and r["eager_floor_bytes"] > 0, where
    top = r["top"]
    assert 0 < len(top) <= 10 and all(a["ms"] >= b["ms"] for a, b in zip(top, top[1:])), where
    assert any(k["kiln"] and "gbps" in k and "bound_us" in k for k in top), f"{where}: no kiln kernel with its rates"
    assert not any(k["name"].startswith("kiln_") for k in top), f"{where}: a kernel without kiln's name"
# The traced step fuses: fewer launches than the eager one's.
for eager, traced in ((rows[0], rows[1]), (rows[2], rows[3])):
    assert traced["kiln_launches"] < eager["kiln_launches"], (eager["model"], traced["kiln_launches"], eager["kiln_launches"])
PY
md=$(python3 "$src/benchmarks/compare_cuda_profiles.py" "$out/kiln.jsonl" "$out/missing.jsonl")
grep -q '^PyTorch: not measured' <<<"$md"
[[ $(grep -c '^| # | kiln kernel |' <<<"$md") == 4 ]] || { echo "$md"; echo "profile_cuda.sh: not 4 kernel tables"; exit 1; }
grep -q '^| H200 bound ms | [0-9.e-]* (eager floor)' <<<"$md"
echo "profile_cuda.sh: 4 rows profiled on the host CUDA and compared"
