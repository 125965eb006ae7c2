#!/usr/bin/env python3
# benchmarks/compare_cuda_models.py -- the example models' GPU training steps, kiln beside
# PyTorch, from one session on one machine (scripts/gpu_pack.sh run writes both files):
#
#   python3 benchmarks/compare_cuda_models.py KILN_JSON TORCH_JSON
#
# KILN_JSON: kiln_cuda_bench --benchmark_filter=cuda/model/ --benchmark_out=... (Google
# Benchmark's JSON); TORCH_JSON: torch_cuda_peer.py --models --json .... Prints a Markdown
# table per precision (fp32, TF32, autocast bf16): each model's step in ms and peak memory,
# and kiln's ratios to PyTorch eager (the targets: traced <= 0.9x, eager <= 1.25x,
# memory <= 1.2x) and to torch.compile.
import json
import sys


def kiln_rows(path):
    rows = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("error_occurred"):
            continue
        name = b["run_name"].split("/iterations")[0].split("/real_time")[0]
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        rows[name] = (b["real_time"] * scale, b.get("peak_GB"))
    return rows


def torch_rows(path):
    return {r["name"]: (r["ms"], r["peak_GB"]) for r in json.load(open(path))["rows"]}


def main():
    k, t = kiln_rows(sys.argv[1]), torch_rows(sys.argv[2])
    models = sorted({n.split("/")[2] for n in list(k) + list(t)})
    fmt = lambda v: "" if v is None else f"{v:.1f}"
    ratio = lambda a, b: "" if a is None or b is None else f"{a / b:.2f}x"
    for suffix, title in (("", "fp32, TF32 off"), ("_tf32", "TF32 allowed"), ("_bf16", "autocast(bf16)")):
        print(f"\n### {title}\n")
        print("| model | kiln eager | kiln traced | torch eager | torch.compile | traced / torch eager | "
              "eager / torch eager | traced / compile | kiln eager peak GB | torch eager peak GB |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for m in models:
            get = lambda rows, v: rows.get(f"cuda/model/{m}/{v}{suffix}", (None, None))
            ke, kt, te, tc = get(k, "eager"), get(k, "traced"), get(t, "eager"), get(t, "compile")
            if all(r[0] is None for r in (ke, kt, te, tc)):
                continue
            print(f"| {m} | {fmt(ke[0])} | {fmt(kt[0])} | {fmt(te[0])} | {fmt(tc[0])} | {ratio(kt[0], te[0])} | "
                  f"{ratio(ke[0], te[0])} | {ratio(kt[0], tc[0])} | {fmt(ke[1])} | {fmt(te[1])} |")


if __name__ == "__main__":
    main()
