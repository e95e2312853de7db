#!/usr/bin/env python3
"""The PyTorch expressions users write for MoE gating, timed on the GPU for issue 28's shapes with the harness's
graph method (../shared/peer-harness/bench.py: a CUDA graph of 16 calls rotating 8 input sets, replayed in batches
of ~10 ms, median per call), beside a device copy of the logits' bytes and, with --lib, moe_topk_gating itself
(ctypes on a shared CUDA build of libmoe_routing.so) in the same process and method.

  python3 torch_gating.py [--dtype fp32|bf16] [--lib path/libmoe_routing.so] [--compile] [--json out.json]

Expressions (what vLLM's torch-native fallbacks and model code do):
  softmax       w, i = torch.topk(torch.softmax(x.float(), -1), k); w /= w.sum(-1, keepdim=True)
  grouped       DeepSeek-V3's grouped_topk: sigmoid, + bias, the sum of each group's top 2, topk_group groups kept
                (scatter mask), masked topk, gather the unbiased scores, renormalize, * 2.5
  sigmoid+bias  Kimi K2: sigmoid, + bias, topk, gather, renormalize, * 2.827
--compile adds torch.compile(mode="max-autotune-no-cudagraphs") of each expression (captured in the same graphs).
"""
import argparse
import ctypes as C
import json
import statistics

import torch

SHAPES = [  # name, experts, topk, groups, kept, score, bias, scale
    ("softmax", 8, 2, 1, 1, "softmax", False, 1.0),
    ("softmax", 128, 8, 1, 1, "softmax", False, 1.0),
    ("sigmoid+bias g8/4", 256, 8, 8, 4, "sigmoid", True, 2.5),
    ("sigmoid+bias", 384, 8, 1, 1, "sigmoid", True, 2.827),
]
TOKENS = [1, 16, 256, 4096, 16384]
CALLS, SETS = 16, 8


def time_graph(calls, batch_ms=10.0, batches=7):
    """calls: zero-arg callables captured into one graph. Median us per call over batches of replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    st.record()
    for _ in range(3):
        g.replay()
    en.record()
    en.synchronize()
    reps = max(1, int(batch_ms / max(st.elapsed_time(en) / 3.0, 1e-4)))
    vals = []
    for _ in range(batches):
        st.record()
        for _ in range(reps):
            g.replay()
        en.record()
        en.synchronize()
        vals.append(st.elapsed_time(en) * 1000.0 / (reps * len(calls)))
    del g
    return statistics.median(vals)


def softmax_topk(x, k):
    w, i = torch.topk(torch.softmax(x.float(), dim=-1), k, dim=-1)
    return w / w.sum(dim=-1, keepdim=True), i.to(torch.int32)


def grouped_topk(x, bias, k, groups, kept, scale):  # DeepSeek-V3 (vLLM grouped_topk, scoring "sigmoid")
    scores = x.float().sigmoid()
    T, E = scores.shape
    s = scores + bias.unsqueeze(0)
    group_scores = s.view(T, groups, -1).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=kept, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(T, groups, E // groups).reshape(T, -1)
    tmp = s.masked_fill(~score_mask.bool(), float("-inf"))
    ids = torch.topk(tmp, k=k, dim=-1, sorted=False)[1]
    w = scores.gather(1, ids)
    return w / w.sum(dim=-1, keepdim=True) * scale, ids.to(torch.int32)


def sigmoid_bias_topk(x, bias, k, scale):  # Kimi K2
    scores = x.float().sigmoid()
    ids = torch.topk(scores + bias.unsqueeze(0), k, dim=-1)[1]
    w = scores.gather(1, ids)
    return w / w.sum(dim=-1, keepdim=True) * scale, ids.to(torch.int32)


class MoeGate(C.Structure):
    _fields_ = [("topk", C.c_int32), ("score", C.c_int), ("num_groups", C.c_int32), ("topk_groups", C.c_int32),
                ("correction_bias", C.c_void_p), ("renormalize", C.c_int32), ("routed_scaling_factor", C.c_float)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--lib", default=None)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    dt = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    lib = None
    if a.lib:
        lib = C.CDLL(a.lib)
        lib.moe_topk_gating.argtypes = [C.c_void_p, C.c_int, C.c_int64, C.c_int32, C.POINTER(MoeGate), C.c_void_p,
                                        C.c_void_p, C.c_void_p]
        lib.moe_topk_gating.restype = C.c_int
        lib.moe_last_error.restype = C.c_char_p
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name(0)
    print("device: %s, torch %s, logits %s" % (dev, torch.__version__, a.dtype), flush=True)
    rows = []
    for name, E, k, groups, kept, score, has_bias, scale in SHAPES:
        bias = (torch.randn(E, device="cuda") * 0.05) if has_bias else None
        if score == "softmax":
            fn = lambda x: softmax_topk(x, k)  # noqa: E731
        elif groups > 1:
            fn = lambda x: grouped_topk(x, bias, k, groups, kept, scale)  # noqa: E731
        else:
            fn = lambda x: sigmoid_bias_topk(x, bias, k, scale)  # noqa: E731
        cfn = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False) if a.compile else None
        for T in TOKENS:
            xs = [(torch.randn(T, E, device="cuda") * 2).to(dt) for _ in range(SETS)]
            row = {"shape": "%d E=%d k=%d %s %s" % (T, E, k, name, a.dtype)}
            row["torch_us"] = time_graph([(lambda j=j: fn(xs[j % SETS])) for j in range(CALLS)])
            if cfn is not None:
                row["compile_us"] = time_graph([(lambda j=j: cfn(xs[j % SETS])) for j in range(CALLS)])
            dst = [torch.empty_like(x) for x in xs]
            row["copy_us"] = time_graph([(lambda j=j: dst[j % SETS].copy_(xs[j % SETS])) for j in range(CALLS)])
            if lib is not None:
                ids = [torch.empty(T, k, dtype=torch.int32, device="cuda") for _ in range(SETS)]
                ws = [torch.empty(T, k, dtype=torch.float32, device="cuda") for _ in range(SETS)]
                gate = MoeGate(k, 0 if score == "softmax" else 1, groups, kept,
                               bias.data_ptr() if bias is not None else None, 1, scale)
                dcode = 5 if dt == torch.float32 else 7

                def proj(j):
                    st = lib.moe_topk_gating(xs[j].data_ptr(), dcode, T, E, C.byref(gate), ids[j].data_ptr(),
                                             ws[j].data_ptr(), C.c_void_p(torch.cuda.current_stream().cuda_stream))
                    if st != 0:
                        raise RuntimeError(lib.moe_last_error().decode())
                proj(0)
                torch.cuda.synchronize()
                w_ref, i_ref = fn(xs[0])  # agreement with torch (different exp and tie rules: not bitwise)
                same = (torch.sort(ids[0], dim=-1)[0] == torch.sort(i_ref, dim=-1)[0]).all(dim=-1).float().mean()
                row["ids_agree_with_torch"] = float(same)
                row["project_us"] = time_graph([(lambda j=j: proj(j % SETS)) for j in range(CALLS)])
            rows.append(row)
            print(row, flush=True)
    cols = ["torch_us"] + (["compile_us"] if a.compile else []) + (["project_us"] if lib else []) + ["copy_us"]
    print("\n%-36s " % "shape" + " ".join("%12s" % c for c in cols) + ("  %12s" % "torch/project" if lib else ""))
    for r in rows:
        line = "%-36s " % r["shape"] + " ".join("%12.3f" % r[c] for c in cols)
        if lib:
            best = min(r["torch_us"], r.get("compile_us", float("inf")))
            line += "  %12.2f" % (best / r["project_us"])
        print(line)
    if a.json:
        json.dump({"device": dev, "torch": torch.__version__, "rows": rows}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
