#!/usr/bin/env python3
# benchmarks/compare_cuda_profiles.py -- the example models' GPU steps kernel by kernel, kiln
# beside PyTorch, from one session on one machine (scripts/gpu_pack.sh run OUT profile writes
# both files and this one's output, OUT/profile.md):
#
#   python3 benchmarks/compare_cuda_profiles.py KILN_JSONL [TORCH_JSONL]
#
# KILN_JSONL: kiln_cuda_profile --json; TORCH_JSONL: torch_cuda_peer.py --profile --json (a
# missing or empty file leaves PyTorch's columns empty). Per model: each variant's step (wall
# time, the time the device was busy, how much of the wall it was not: the host's share,
# kernels a step) and the cost model's bounds; then per pair (kiln eager beside PyTorch eager,
# kiln traced beside torch.compile) the two top-kernel tables side by side, with the cost
# model's roofline bound of each kiln kernel's bytes and FLOPs as the third column.
import json
import os
import sys


def rows(path):
    out = {}
    if path and os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                out[(r["model"], r["variant"])] = r
    return out


def cell(v, f="{:.2f}"):
    return "" if v is None else f.format(v)


def name(n, width=56):
    n = n.replace("|", "\\|")
    return n if len(n) <= width else n[:width - 3] + "..."


def step_table(m, k, t):
    cols = [("kiln eager", k.get((m, "eager"))), ("torch eager", t.get((m, "eager"))),
            ("kiln traced", k.get((m, "traced"))), ("torch.compile", t.get((m, "compile")))]
    print("| per step | " + " | ".join(c for c, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    get = lambda r, f: None if r is None else r.get(f)
    print("| wall ms | " + " | ".join(cell(get(r, "wall_ms")) for _, r in cols) + " |")
    print("| device busy ms | " + " | ".join(cell(get(r, "device_busy_ms")) for _, r in cols) + " |")
    host = lambda r: None if not r or not r.get("wall_ms") or r.get("missing") else \
        100 * (1 - r["device_busy_ms"] / r["wall_ms"])
    print("| device idle (host's share) | " + " | ".join(cell(host(r), "{:.0f}%") for _, r in cols) + " |")
    print("| kernels | " + " | ".join(cell(get(r, "device_kernels"), "{:.0f}") for _, r in cols) + " |")
    ke, kt, te = cols[0][1], cols[2][1], cols[1][1]
    any_k = ke or kt
    if any_k:
        peak = any_k["peak"]
        torch_floor = None
        if te and te.get("eager_floor"):
            torch_floor = max(1e3 * te["eager_floor"]["bytes"] / any_k["peak_bandwidth"],
                              any_k.get("eager_floor_math_ms", 0))
        g = "{:.3g}"
        print(f"| {peak} bound ms | {cell(get(any_k, 'eager_floor_ms'), g)} (eager floor) | "
              f"{cell(torch_floor, g)} (floor of the tensors it saves) | {cell(get(any_k, 'plan_bound_ms'), g)} (plan) | |")
    missing = {r.get("missing") for _, r in cols if r and r.get("missing")}
    for why in missing:
        print(f"\nNo device timeline for kiln: {why}")


def kernel_tables(m, k, t, top):
    for kv, tv, title in (("eager", "eager", "eager"), ("traced", "compile", "traced beside torch.compile")):
        kr, tr = k.get((m, kv)), t.get((m, tv))
        if not kr and not tr:
            continue
        kk, tk = (kr or {}).get("top", [])[:top], (tr or {}).get("top", [])[:top]
        print(f"\n{title}, top kernels by device time (ms and calls a step):\n")
        print("| # | kiln kernel | calls | ms | share | GB/s | % peak BW | PyTorch kernel | calls | ms | share "
              "| bound us |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for i in range(max(len(kk), len(tk))):
            a = kk[i] if i < len(kk) else {}
            b = tk[i] if i < len(tk) else {}
            print(f"| {i + 1} | {name(a.get('name', ''))} | {cell(a.get('calls'), '{:.0f}')} | {cell(a.get('ms'), '{:.3f}')}"
                  f" | {cell(a.get('share') and 100 * a['share'], '{:.1f}%')} | {cell(a.get('gbps'), '{:.0f}')}"
                  f" | {cell(a.get('pct_bw'), '{:.0f}%')} | {name(b.get('name', ''))} | {cell(b.get('calls'), '{:.0f}')}"
                  f" | {cell(b.get('ms'), '{:.3f}')} | {cell(b.get('share') and 100 * b['share'], '{:.1f}%')}"
                  f" | {cell(a.get('bound_us'), '{:.1f}')} |")


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: compare_cuda_profiles.py KILN_JSONL [TORCH_JSONL]")
    k, t = rows(sys.argv[1]), rows(sys.argv[2] if len(sys.argv) > 2 else None)
    top = int(os.environ.get("KILN_PROFILE_TOP", "20"))
    models = []
    for m, _ in list(k) + list(t):
        if m not in models:
            models.append(m)
    if not t:
        print("PyTorch: not measured (no rows from torch_cuda_peer.py --profile)\n")
    for m in models:
        print(f"\n### {m}\n")
        step_table(m, k, t)
        kernel_tables(m, k, t, top)


if __name__ == "__main__":
    main()
