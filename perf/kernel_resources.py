#!/usr/bin/env python3
"""Registers, stack/spills and SASS size of every kernel of a CUDA build (no GPU needed).

Usage: perf/kernel_resources.py BUILD_DIR [--all] [--filter SUBSTRING]

BUILD_DIR is a Ninja build configured with -DMOE_BACKEND=CUDA. Each .cu of the library is compiled again
with the build's own nvcc command, for its first sm_XX only, to a cubin with `-Xptxas=-v`: registers and
stack/spills from ptxas, SASS bytes from the cubin's .text.<kernel> sections (`readelf`; this machine has no
cuobjdump). Prints a Markdown table: by default the kernels the issue-5 shapes run (int32 ids, block size 64)
and the moe_sum kernels, with --all every kernel. Exits 1 if any kernel spills or has a stack frame.
"""
import argparse
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# The instances the H200 plan picks for the issue-5 shapes (perf/RESULTS.md, table of targets): int32 ids,
# block size 64 (a power of two), 132 SMs.
HOT = {
    "void moe::gpu::tiny_kernel<true, moe::gpu::IdSource<int>, moe::gpu::NoExtras>": "1x8",
    "void moe::gpu::owned_kernel<4, 2, true, moe::gpu::IdSource<int>, moe::gpu::NoExtras>": "256x8 (E=256: 2 experts per block)",
    "void moe::gpu::cluster_kernel<2, true, moe::gpu::IdSource<int> >": "4096x8 (8 clusters of 8, 2 ids per thread)",
    "void moe::gpu::grid_kernel<4, moe::gpu::IdSource<int> >": "16384x8, 65536x2",
    "void moe::gpu::grid_kernel<16, moe::gpu::IdSource<int> >": "65536x8, uniform and skewed",
}


def nvcc_commands(build):
    out = subprocess.run(["ninja", "-C", str(build), "-t", "commands", "moe_routing"], check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "nvcc" in line and re.search(r"-c \S+\.cu\b", line)]


def cubin_command(cmd, cubin):
    args = shlex.split(cmd)
    src = args[args.index("-c") + 1]
    keep, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in ("-c", "-o", "-MT", "-MF", "-x"):
            skip = 1
            continue
        if a == "-MD":
            continue
        m = re.match(r"--generate-code=arch=compute_(\d+),code=", a)
        if m:
            if any(k.startswith("-arch=") for k in keep):
                continue  # the first architecture only
            a = f"-arch=sm_{m.group(1)}"
        if a.startswith("-Xptxas="):
            a = a.replace("-Xptxas=", "-Xptxas=-v,")
        keep.append(a)
    return keep + ["-cubin", src, "-o", str(cubin)]


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("void ", "")
    name = re.sub(r"moe::numeric::ValueTraits<moe::numeric::(\w+)>", r"\1", name)
    return re.sub(r"\(.*$", "", name).replace(" >", ">")  # without the parameter list


def sum_shape(name):
    """moe_sum's dispatch (backends/cuda_hip/sum.cu): <dtype, in flight, vectors per thread, topk or 0>."""
    m = re.search(r"sum_vec_kernel<\w+, (\d+), (\d+), (\d+)>", name)
    if m:
        topk = int(m.group(3))
        return f"moe_sum topk {topk}" if topk else f"moe_sum other topk <= {m.group(1)}"
    return "moe_sum, unaligned or odd hidden" if "sum_scalar_kernel" in name else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--filter", default=None)
    opt = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, cmd in enumerate(nvcc_commands(Path(opt.build))):
            cubin = Path(tmp) / f"{i}.cubin"
            r = subprocess.run(cubin_command(cmd, cubin), capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(r.stderr)
            entry = None
            for line in r.stderr.splitlines():
                m = re.search(r"Compiling entry function '(\S+)'", line)
                if m:
                    entry = m.group(1)
                    rows[entry] = {}
                m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
                if m and entry:
                    rows[entry]["stack"] = tuple(int(x) for x in m.groups())
                m = re.search(r"Used (\d+) registers", line)
                if m and entry:
                    rows[entry]["regs"] = int(m.group(1))
            sections = subprocess.run(["readelf", "-SW", str(cubin)], capture_output=True, text=True).stdout
            for m in re.finditer(r"\] \.text\.(\S+)\s+PROGBITS\s+\S+\s+\S+\s+([0-9a-f]+)", sections):
                rows.setdefault(m.group(1), {})["sass"] = int(m.group(2), 16)
    names = list(rows)
    pretty = dict(zip(names, demangle(names)))
    bad = [n for n in names if any(rows[n].get("stack", (0, 0, 0)))]
    print("| kernel | shape | registers | stack, spill stores, spill loads (bytes) | SASS bytes |")
    print("|---|---|---|---|---|")
    for n in sorted(names, key=lambda n: short(pretty[n])):
        p = pretty[n]
        hot = HOT.get(re.sub(r"\(.*$", "", p), "") or sum_shape(short(p))
        if not opt.all and not hot:
            continue
        if opt.filter and opt.filter not in p:
            continue
        r = rows[n]
        stack = ", ".join(str(x) for x in r.get("stack", ("?",)))
        print(f"| `{short(p)}` | {hot} | {r.get('regs', '?')} | {stack} | {r.get('sass', '?')} |")
    print(f"\n{len(names)} kernels, {len(bad)} with a stack frame or spills", file=sys.stderr)
    for n in bad:
        print("  " + pretty[n], file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
