#!/usr/bin/python3
"""Markdown tables for perf/RESULTS.md from moe_bench CSVs (perf/results/*.csv):

  /usr/bin/python3 perf/results_tables.py perf/results
"""
import csv
import os
import sys


def load(path):
    return {(r["op"], r["shape"]): r for r in csv.DictReader(open(path))} if os.path.exists(path) else {}


TARGETS = [  # issue 5: shape, best public us, target us
    ("1x8 E=256 bs=64 uniform", 4.3, 1.5), ("256x8 E=256 bs=64 uniform", 5.3, 2.0),
    ("4096x8 E=256 bs=64 uniform", 18.5, 5), ("16384x8 E=256 bs=64 uniform", 59, 10),
    ("65536x8 E=256 bs=64 uniform", 168, 20), ("65536x8 E=256 bs=64 skew", 334, 25),
    ("65536x2 E=8 bs=64 uniform", 57, 10)]


def main(d):
    cuda, hip = load(f"{d}/cuda-all.csv"), load(f"{d}/hip-all.csv")
    plain = load(f"{d}/cuda-plain-all.csv")  # MOE_ROUTING_LAUNCH_OVERLAP=0
    copies = load(f"{d}/cuda-sum-copy.csv") or cuda  # where the same-bytes copy column was measured
    any_row = next(iter(cuda.values()))
    copy, node = float(any_row["copy_gbs"]), float(any_row["empty_node_us"])
    plain_node = any_row.get("plain_empty_node_us")
    print(f"Floors of this run: empty graph node {node:.3f} us as the library launches"
          + (f" ({float(plain_node):.3f} us as a plain launch)" if plain_node else "")
          + f", device copy {copy:.0f} GB/s.\n")

    def us(table, key):
        r = table.get(key)
        return f"{float(r['graph_us']):.2f}" if r else "-"

    print("| shape (block 64) | path | CUDA us | CUDA plain-launch us | HIP us | best public us | target us | public / ours | met |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape, public, target in TARGETS:
        r = cuda[("align", shape)]
        h = hip.get(("align", shape))
        t = float(r["graph_us"])
        print(f"| {shape.replace(' bs=64', '')} | {r['path']} | {t:.2f} | {us(plain, ('align', shape))} | {us(hip, ('align', shape))} "
              f"| {public} | {target} | {public / t:.2f} | {'yes' if t <= target else f'no, +{(t / target - 1) * 100:.0f} %'} |")
    print("\n| moe_sum shape | CUDA us | CUDA plain-launch us | HIP us | effective GB/s | of copy | copy of the same bytes us | ours / that copy |")
    print("|---|---|---|---|---|---|---|---|")
    for (op, shape), r in cuda.items():
        if op != "sum":
            continue
        print(f"| {shape} | {float(r['graph_us']):.2f} | {us(plain, (op, shape))} | {us(hip, (op, shape))} "
              f"| {float(r['effective_gbs']):.0f} | {float(r['effective_gbs']) / copy:.3f} "
              + (f"| {float(c['same_bytes_copy_us']):.2f} | {float(r['graph_us']) / float(c['same_bytes_copy_us']):.3f} |"
                 if (c := copies.get((op, shape))) and float(c.get("same_bytes_copy_us") or 0) > 0 else "| - | - |"))
    print("\n| align shape | path | CUDA us | cold us | plain-launch / CUDA | HIP / CUDA |")
    print("|---|---|---|---|---|---|")
    for (op, shape), r in cuda.items():
        if op != "align":
            continue
        h = hip.get((op, shape))
        ratio = f"{float(h['graph_us']) / float(r['graph_us']):.3f}" if h else "-"
        p = plain.get((op, shape))
        pr = f"{float(p['graph_us']) / float(r['graph_us']):.3f}" if p else "-"
        print(f"| {shape} | {r['path']} | {float(r['graph_us']):.2f} | {float(r['cold_us']):.2f} | {pr} | {ratio} |")
    ch, kh = load(f"{d}/cuda-host.csv"), load(f"{d}/kokkos-host.csv")
    if ch and kh:
        print("\n| shape (host timing, same run) | CUDA us | Kokkos-CUDA us | Kokkos / CUDA |")
        print("|---|---|---|---|")
        for k, r in ch.items():
            if k in kh:
                a, b = float(r["graph_us"]), float(kh[k]["graph_us"])
                print(f"| {k[0]} {k[1]} | {a:.1f} | {b:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "perf/results")
