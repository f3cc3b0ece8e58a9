#!/usr/bin/env python3
"""Markdown tables for docs/RESULTS.md from run-s37c.sh output: compare_sdpa.py's per-head_dim CSVs (decode rows,
SDPA in the same run) and the bench's grid CSVs (encode rows). Usage: s37-table.py DIR (holding compare-*.csv and
grid-*.csv)."""
import csv
import glob
import sys
from collections import defaultdict

d = sys.argv[1]
rows = [r for f in sorted(glob.glob(f"{d}/compare-*.csv")) for r in csv.DictReader(open(f))]
shape = lambda r: (int(r["head_dim"]), r["heads"], int(r["batch"]), int(r["context"]))
by = defaultdict(dict)
for r in rows:
    by[shape(r)][r["method"]] = r
cols = [("sdpa-cudnn", "cuDNN"), ("sdpa-flash", "Flash"), ("dequant+sdpa (4-bit)", "dequant + SDPA 4b"),
        ("turbokv fp16 (ours)", "ours fp16"), ("turbokv tq-mse K4V4", "TQ K4V4"), ("turbokv tq-mse K3V3", "TQ K3V3"),
        ("turbokv tq-mse K2V2", "TQ K2V2"), ("turbokv tq-prod K4 V4", "Prod K4V4"), ("turbokv tq-prod K3 V3", "Prod K3V3")]
print("| shape | " + " | ".join(c[1] for c in cols) + " |")
print("|---|" + "---|" * len(cols))
for (hd, heads, b, ctx), m in sorted(by.items(), key=lambda kv: (-kv[0][0] if kv[0][0] == 128 else kv[0][0], kv[0][2], kv[0][3])):
    cells = []
    for key, _ in cols:
        r = m.get(key)
        if not r:
            cells.append("–")
        elif key.startswith("turbokv tq-mse"):
            cells.append(f"{float(r['time_us']):.1f} ({float(r['speedup_vs_best_sdpa']):.2f}×, {r['gbps']})")
        elif key.startswith("turbokv"):
            cells.append(f"{float(r['time_us']):.1f} ({float(r['speedup_vs_best_sdpa']):.2f}×)")
        else:
            cells.append(f"{float(r['time_us']):.1f}")
    print(f"| d{hd} {heads} b{b} {ctx // 1024}k | " + " | ".join(cells) + " |")

enc = defaultdict(dict)
for f in sorted(glob.glob(f"{d}/grid-*.csv")):
    for r in csv.DictReader(open(f)):
        if r["op"] != "encode":
            continue
        k = (int(r["head_dim"]), r["method"].replace("tq-mse", "").strip(" ()") or "fp32 in", r["bits"])
        enc[k][(int(r["batch"]), int(r["context"]))] = float(r["gbps"])
if enc:
    print("\nEncode, GB/s of input plus output, min-max over the grid's batch x context (best at):")
    print("| head_dim | input | 2-bit | 3-bit | 4-bit |")
    print("|---|---|---|---|---|")
    for hd in sorted({k[0] for k in enc}):
        for inp in ("fp32 in", "fp16 in", "bf16 in"):
            cells = []
            for bits in ("2", "3", "4"):
                v = enc.get((hd, inp, bits))
                if not v:
                    cells.append("–")
                    continue
                best = max(v, key=v.get)
                cells.append(f"{min(v.values()):.0f}-{v[best]:.0f} (b{best[0]} × {best[1] // 1024}k)")
            print(f"| {hd} | {inp} | " + " | ".join(cells) + " |")
