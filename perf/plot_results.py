#!/usr/bin/python3
"""Chart of moe_bench CSV output: align_block_size time per call vs num_tokens, one line per expert count
(and per backend when several CSVs are given), log-log, with the empty-graph-node floor.

  /usr/bin/python3 perf/plot_results.py OUT.png RESULT.csv [RESULT.csv ...] [--topk 8] [--block 64]

Debian's python3-matplotlib works with /usr/bin/python3 (see tools/install-deps.sh)."""
import csv
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    args = [a for a in argv[1:]]
    topk, block = "8", "64"
    for flag in ("--topk", "--block"):
        if flag in args:
            i = args.index(flag)
            if flag == "--topk":
                topk = args[i + 1]
            else:
                block = args[i + 1]
            del args[i:i + 2]
    out, files = args[0], args[1:]
    series = defaultdict(list)
    floor = None
    for f in files:
        for r in csv.DictReader(open(f)):
            m = re.match(r"(\d+)x(\d+) E=(\d+) bs=(\d+) uniform", r["shape"])
            if r["op"] != "align" or not m or m.group(2) != topk or m.group(4) != block:
                continue
            tokens, experts = int(m.group(1)), int(m.group(3))
            pts = series[(r["backend"], experts)]
            if tokens not in [t for t, _ in pts]:  # a shape in two suites: keep its first measurement
                pts.append((tokens, float(r["graph_us"])))
            floor = float(r["empty_node_us"])
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.get_cmap("tab10").colors
    experts_seen = sorted({e for _, e in series})
    for (backend, experts), pts in sorted(series.items()):
        pts.sort()
        style = "-" if backend == "cuda" else "--" if backend == "hip" else ":"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=4,
                color=colors[experts_seen.index(experts) % 10], label=f"{backend}, {experts} experts")
    if floor:
        ax.axhline(floor, color="gray", lw=1, label=f"empty graph node {floor:.2f} us")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("num_tokens")
    ax.set_ylabel("us per call (graph of 16, rotated inputs)")
    ax.set_title(f"align_block_size, topk {topk}, block_size {block}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv)
