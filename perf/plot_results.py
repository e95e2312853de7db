#!/usr/bin/python3
"""Chart of moe_bench CSV output: align_block_size time per call vs num_tokens, one line per expert count
(and per backend when several are given), log-log, with the empty-graph-node floor.

  /usr/bin/python3 perf/plot_results.py OUT.png RESULT.csv [RESULT.csv ...] [--topk 8] [--block 64] [--run NAME ...]

RESULT.csv is a baseline CSV of perf/results (its first column `run` names the run of each row; see
results_tables.py) or a plain moe_bench CSV. Of a baseline, the runs named by --run are drawn (default: `cuda`, or
its repetitions `cuda-1`, `cuda-2`, ...); a shape measured twice in one run keeps its first measurement, a shape in
several repetitions its best. The charts of RESULTS.md:

  /usr/bin/python3 perf/plot_results.py perf/results/baseline-h200.png perf/results/baseline-h200.csv
  /usr/bin/python3 perf/plot_results.py perf/results/baseline-h100.png perf/results/baseline-h100.csv

Debian's python3-matplotlib works with /usr/bin/python3 (see tools/install-deps.sh)."""
import csv
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def wanted(run, runs):
    if run is None:  # a plain moe_bench CSV
        return True
    if runs:
        return run in runs
    return run == "cuda" or re.fullmatch(r"cuda-\d+", run) is not None


def main(argv):
    args = list(argv[1:])
    topk, block, runs = "8", "64", []
    while any(a in args for a in ("--topk", "--block", "--run")):
        for flag in ("--topk", "--block", "--run"):
            if flag in args:
                i = args.index(flag)
                value = args[i + 1]
                del args[i:i + 2]
                if flag == "--topk":
                    topk = value
                elif flag == "--block":
                    block = value
                else:
                    runs.append(value)
    if len(args) < 2:
        sys.exit(__doc__)
    out, files = args[0], args[1:]
    first = {}  # (run, backend, experts, tokens) -> us: the first measurement of a shape in a run
    floor = None
    for f in files:
        for r in csv.DictReader(open(f)):
            run = r.get("run")
            m = re.match(r"(\d+)x(\d+) E=(\d+) bs=(\d+) uniform", r["shape"])
            if (not wanted(run, runs) or r["op"] != "align" or not m or m.group(2) != topk
                    or m.group(4) != block):
                continue
            key = (f"{f}:{run}", r["backend"], int(m.group(3)), int(m.group(1)))
            first.setdefault(key, float(r["graph_us"]))
            if floor is None:
                floor = float(r["empty_node_us"])
    if not first:
        sys.exit(f"no align rows with topk {topk}, block {block} in the runs asked for")
    best = {}  # (backend, experts, tokens) -> least us over the runs drawn
    for (_, backend, experts, tokens), t in first.items():
        k = (backend, experts, tokens)
        best[k] = min(t, best.get(k, t))
    series = defaultdict(list)
    for (backend, experts, tokens), t in best.items():
        series[(backend, experts)].append((tokens, t))
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
