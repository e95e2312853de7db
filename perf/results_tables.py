#!/usr/bin/python3
"""The tables of perf/RESULTS.md, from the baseline CSVs in perf/results/ (one per device):

  /usr/bin/python3 perf/results_tables.py [perf/results]        # tables of every baseline-*.csv found there
  /usr/bin/python3 perf/results_tables.py merge OUT.csv RUN=IN.csv [RUN=IN.csv ...]

A baseline CSV is moe_bench's CSVs of ONE device run put together by `merge`, each row tagged with the run it
came from (first column `run`; the builds and commands behind each run name are in RESULTS.md). Runs the tables
use, where present:
  baseline-h200.csv, baseline-h100.csv: `cuda` (or `cuda-1`, `cuda-2`, ...: repetitions, best of them taken),
    `cuda-plain` (MOE_ROUTING_LAUNCH_OVERLAP=0), `hip` (HIP backend, NVIDIA platform), `targets-N`
    (`--suite targets`), `host-cuda` and `host-kokkos` (`--timing host`, for the Kokkos-CUDA table);
  baseline-cpu.csv: `cpu` (CPU reference) and `kokkos-openmp`, both `--timing host`.
"""
import csv
import glob
import os
import re
import sys
from collections import defaultdict

TARGETS = [  # issue 5: shape, target us
    ("1x8 E=256 bs=64 uniform", 1.5), ("256x8 E=256 bs=64 uniform", 2.0), ("4096x8 E=256 bs=64 uniform", 5),
    ("16384x8 E=256 bs=64 uniform", 10), ("65536x8 E=256 bs=64 uniform", 20), ("65536x8 E=256 bs=64 skew", 25),
    ("65536x2 E=8 bs=64 uniform", 10)]

MANY = [f"{t}x8 E={e} bs=64 uniform" for t, es in ((1, (1024, 4096, 65536)), (256, (1024, 4096, 65536)),
                                                   (4096, (1024, 4096, 65536)), (65536, (1024, 4096, 65536)))
        for e in es] + ["65536x8 E=256 bs=64 ep8", "4096x8 E=256 bs=64 skew", "4096x8 E=256 bs=64 ep8",
                        "262144x8 E=256 bs=64 uniform"]


def merge(out, pairs):
    rows, fields = [], ["run"]
    for pair in pairs:
        run, path = pair.split("=", 1)
        for r in csv.DictReader(open(path)):
            fields += [k for k in r if k not in fields]
            rows.append({"run": run, **r})
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}: {len(rows)} rows")


def load(path):
    """{run: {(op, shape): row}}; of a shape measured twice in a run (in two suites), the last row is kept."""
    runs = defaultdict(dict)
    for r in csv.DictReader(open(path)):
        runs[r["run"]][(r["op"], r["shape"])] = r
    return runs


def best(runs, prefix):
    """The run `prefix`, or the best (least graph_us) over the runs `prefix-N` per shape."""
    if prefix in runs:
        return runs[prefix], 1
    reps = [v for k, v in runs.items() if re.fullmatch(re.escape(prefix) + r"-\d+", k)]
    out = {}
    for rep in reps:
        for key, r in rep.items():
            if key not in out or float(r["graph_us"]) < float(out[key]["graph_us"]):
                out[key] = r
    return out, len(reps)


def us(table, key, digits=2):
    r = table.get(key)
    return f"{float(r['graph_us']):.{digits}f}" if r else "-"


def floors(name, runs):
    print(f"Floors of this run ({name}):")
    for run, table in sorted(runs.items()):
        r = next(iter(table.values()))
        if not float(r.get("empty_node_us") or 0):
            continue
        plain = r.get("plain_empty_node_us")
        print(f"- {run}: empty graph node {float(r['empty_node_us']):.3f} us as the library launches"
              + (f" ({float(plain):.3f} as a plain launch)" if plain else "")
              + f", device copy {float(r['copy_gbs']):.0f} GB/s")
    print()


def gpu_tables(name, runs):
    cuda, reps = best(runs, "cuda")
    if not cuda:
        return
    plain, hip = best(runs, "cuda-plain")[0], best(runs, "hip")[0]
    tgt = sorted(k for k in runs if k.startswith("targets-"))
    copy = float(next(iter(cuda.values()))["copy_gbs"])
    print(f"## {name}" + (f" (cuda: best of {reps} runs)" if reps > 1 else "") + "\n")
    floors(name, runs)

    others = [(n, t) for n, t in (("CUDA plain-launch", plain), ("HIP", hip)) if t]  # runs this device has
    print("| shape (block 64) | path | CUDA us | " + "".join(f"{n} us | " for n, _ in others)
          + "".join(f"{t} us | " for t in tgt) + "target us | met |")
    print("|---|---|---|" + "---|" * (len(others) + len(tgt)) + "---|---|")
    for shape, target in TARGETS:
        key = ("align", shape)
        if key not in cuda:
            continue
        t = float(cuda[key]["graph_us"])
        met = "yes" if t <= target else f"no, +{(t / target - 1) * 100:.0f} %"
        print(f"| {shape.replace(' bs=64', '')} | {cuda[key]['path']} | {t:.2f} | "
              + "".join(f"{us(tab, key)} | " for _, tab in others)
              + "".join(f"{us(runs[n], key)} | " for n in tgt) + f"{target} | {met} |")

    sums = [(k, r) for k, r in cuda.items() if k[0] == "sum"]
    if sums:
        print("\n| moe_sum shape | CUDA us | CUDA plain-launch us | HIP us | effective GB/s | of copy "
              "| copy of the same bytes us | ours / that copy |")
        print("|---|---|---|---|---|---|---|---|")
        for key, r in sums:
            c = float(r.get("same_bytes_copy_us") or 0)
            print(f"| {key[1]} | {float(r['graph_us']):.2f} | {us(plain, key)} | {us(hip, key)} "
                  f"| {float(r['effective_gbs']):.0f} | {float(r['effective_gbs']) / copy:.3f} "
                  + (f"| {c:.2f} | {float(r['graph_us']) / c:.3f} |" if c > 0 else "| - | - |"))

    many = [("align", s) for s in MANY if ("align", s) in cuda]
    if many:
        ratios = [(n, t) for n, t in (("plain-launch", plain), ("HIP", hip)) if t]
        print(("\n| align shape | path | CUDA us | cold us | " + "".join(f"{n} / CUDA | " for n, _ in ratios)).rstrip())
        print("|---|---|---|---|" + "---|" * len(ratios))
        for key in many:
            r = cuda[key]
            t = float(r["graph_us"])
            ratio = lambda tab: f"{float(tab[key]['graph_us']) / t:.3f}" if key in tab else "-"  # noqa: E731
            print((f"| {key[1]} | {r['path']} | {t:.2f} | {float(r['cold_us']):.2f} | "
                   + "".join(f"{ratio(tab)} | " for _, tab in ratios)).rstrip())

    if hip and plain:
        same = [k for k in cuda if k in hip and k in plain and hip[k]["path"] == cuda[k]["path"]]
        other = [k for k in cuda if k in hip and k not in same]
        print("\n| HIP-on-NVIDIA against CUDA, same run | shapes | min | mean | max |")
        print("|---|---|---|---|---|")

        def row(what, keys, den):
            v = [float(hip[k]["graph_us"]) / float(den[k]["graph_us"]) for k in keys]
            if v:
                print(f"| {what} | {len(v)} | {min(v):.2f} | {sum(v) / len(v):.3f} | {max(v):.2f} |")
        row("HIP / CUDA plain-launch, same kernels", same, plain)
        row("HIP / CUDA, same kernels", same, cuda)
        row("HIP / CUDA, CUDA on a cluster path", other, cuda)

    ch, kh = runs.get("host-cuda", {}), runs.get("host-kokkos", {})
    if ch and kh:
        print("\n| shape (host timing, same run) | CUDA us | Kokkos-CUDA us | Kokkos / CUDA |")
        print("|---|---|---|---|")
        for k, r in ch.items():
            if k in kh:
                a, b = float(r["graph_us"]), float(kh[k]["graph_us"])
                print(f"| {k[0]} {k[1]} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    print()


def cpu_tables(runs):
    ref, kok = runs.get("cpu", {}), runs.get("kokkos-openmp", {})
    if ref and kok:
        print("## cpu\n")
        print("| shape | CPU reference us | Kokkos OpenMP us | Kokkos / reference |")
        print("|---|---|---|---|")
        for k, r in ref.items():
            if k in kok:
                a, b = float(r["graph_us"]), float(kok[k]["graph_us"])
                print(f"| {k[0]} {k[1]} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
        print()


def main(d):
    paths = sorted(glob.glob(os.path.join(d, "baseline-*.csv")))
    if not paths:
        sys.exit(f"no baseline-*.csv in {d}")
    for path in paths:
        name = os.path.basename(path)[len("baseline-"):-len(".csv")]
        runs = load(path)
        (cpu_tables if name == "cpu" else lambda r: gpu_tables(name, r))(runs)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "merge":
        if len(sys.argv) < 4:
            sys.exit(__doc__)
        merge(sys.argv[2], sys.argv[3:])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "perf/results")
