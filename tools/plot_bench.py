#!/usr/bin/env python3
"""Plot `turbokv bench --json` results: decode-attention time against context
length, one line per (method, bits), one panel per thread count.

    python3 tools/plot_bench.py docs/results/bench-cpu.json [more.json ...] -o docs/results/bench-cpu.png

Rows with op == "decode_attention" are plotted (dense baselines included);
several JSON files are merged (e.g. two bench runs with different --methods);
where two files time the same case the first file's row is kept.
"""
import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="turbokv bench --json output(s)")
    ap.add_argument("-o", "--out", required=True, help="output image (.png)")
    ap.add_argument("--bits", default="", help="comma-separated widths to plot (default all); a method with no row "
                    "at these widths keeps its rows (qjl 1-bit, fp8 8-bit), the dense and fp16 baselines always")
    args = ap.parse_args()

    rows, seen = [], set()
    for path in args.json:  # the first file wins where two files time the same case
        with open(path) as f:
            for r in json.load(f)["results"]:
                key = (r["op"], r["method"], r["bits"], r["context"], r["threads"])
                if key not in seen:
                    seen.add(key)
                    rows.append(r)
    rows = [r for r in rows if r["op"] == "decode_attention"]
    if args.bits:
        keep = {float(b) for b in args.bits.split(",")}
        has = {r["method"] for r in rows if float(r["bits"]) in keep}
        rows = [r for r in rows if float(r["bits"]) in keep or r["method"] not in has or r["bits"] >= 16]
    if not rows:
        raise SystemExit("no decode_attention rows in " + ", ".join(args.json))
    threads = sorted({r["threads"] for r in rows})
    fig, axes = plt.subplots(1, len(threads), figsize=(6.5 * len(threads), 5), squeeze=False)
    for ax, thr in zip(axes[0], threads):
        series = defaultdict(list)
        for r in rows:
            if r["threads"] != thr:
                continue
            bits = r["bits"]
            label = r["method"] if r["method"].endswith("-dense") else f"{r['method']} {bits:g}-bit"
            series[label].append((r["context"], r["time_us"] / 1000.0))
        ax.set_prop_cycle(color=plt.cm.tab20.colors)  # 20 distinct colours: one per line at one width
        for label in sorted(series, key=lambda s: (not s.endswith("dense"), s)):
            pts = sorted(series[label])
            style = "--" if label.endswith("dense") or "16-bit" in label else "-"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("decode attention time (ms)")
        r0 = rows[0]
        ax.set_title(f"{thr} thread(s), head_dim {r0['head_dim']}, {r0['num_heads']}/{r0['num_kv_heads']} heads")
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, ncol=1 if len(labels) <= 30 else 2)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
