#!/usr/bin/env python3
"""Plot `turbokv eval --json` results: error against all-in bits per element.

usage: plot_eval.py RESULTS.json OUT.png

One row of panels per model; panels: key NMSE, attention output relative
error, top-k recall. One line per method, points averaged over layers.
"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        results = json.load(f)["results"]
    models = sorted({r["model"] for r in results})
    metrics = [("key_nmse", "key NMSE", True), ("attn_rel_err", "attention rel. error", True),
               ("topk_recall", "top-32 recall", False)]
    fig, axes = plt.subplots(len(models), len(metrics), figsize=(5 * len(metrics), 4 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        # (method, bits) -> list of rows over layers
        groups = defaultdict(list)
        for r in results:
            if r["model"] == model:
                groups[(r["method"], r["bits"])].append(r)
        methods = sorted({m for m, _ in groups})
        palette = plt.get_cmap("tab10").colors
        color = {m: palette[i % len(palette)] for i, m in enumerate(sorted({r["method"] for r in results}))}
        for col, (key, label, log) in enumerate(metrics):
            ax = axes[row][col]
            for m in methods:
                pts = sorted((sum(x["bits_per_element"] for x in rs) / len(rs), sum(x[key] for x in rs) / len(rs))
                             for (mm, _), rs in groups.items() if mm == m)
                if log:
                    pts = [(b, v) for b, v in pts if v > 0]  # fp16 passthrough of fp16 data: exactly 0
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m, color=color[m])
            ax.set_xlabel("bits per element (all-in)")
            ax.set_ylabel(label)
            if log:
                ax.set_yscale("log")
            ax.set_title(f"{model}: {label}")
            ax.grid(True, alpha=0.3)
        axes[row][len(metrics) - 1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
