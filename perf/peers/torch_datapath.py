#!/usr/bin/env python3
"""What users write today for the MoE data path, in PyTorch, timed on the GPU beside moe-routing's moe_permute and
moe_combine (ctypes, when --lib is given) and a device copy of the same bytes.

  python3 torch_datapath.py [--lib path/to/libmoe_routing.so] [--quick] [--dtype bf16|fp16|fp32] [--json FILE]

Shapes: tokens 1, 4096, 16384 x hidden 2048, 4096, 7168 x topk 2, 8 (each token picks topk distinct experts of
256; the expert-grouped layout of an align with block 64). Method as ../../shared/peer-harness/bench.py: a CUDA
graph of 16 calls rotating input sets, replayed in batches of ~20 ms, median us per call.

  permute  torch.index_select  hidden.index_select(0, src) with src = sorted_ids // topk precomputed (padding
                               rows get row 0: not zeroed; the cheapest gather torch offers)
           torch masked        the index arithmetic and the zeroed padding inside the call (what a correct
                               permute needs), over the whole capacity (torch cannot read num_tokens_post_pad
                               without a host sync)
           moe_permute         the library: rows [0, num_tokens_post_pad), padding zeroed
  combine  torch gather+sum    rows.index_select(0, positions).view(T, k, H), fp32 weights, .sum(1)
           torch index_add_    out.index_add_(0, token_of_row, rows * w) in fp32, then cast
           moe_combine         the library (MOE_ROWS_PERMUTED, token positions, fp32 weights)
  copy                         a device-to-device copy of the bytes moe_permute / moe_combine move
"""
import argparse
import ctypes as C
import json
import statistics

import torch

MOE_DT = {torch.float32: 5, torch.float16: 6, torch.bfloat16: 7}
MOE_FLOAT8_E4M3 = 8
MOE_ROWS_PERMUTED = 1


def time_graph(calls, batch_ms=20.0, batches=7):
    """calls: 16 zero-arg callables, captured into one graph; median us per call over batches of ~batch_ms."""
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
    est = st.elapsed_time(en) / 3.0
    reps = max(1, int(batch_ms / max(est, 1e-4)))
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


def align_layout(ids, E, bs):
    """The expert-grouped layout of moe_align_block_size (stable, padded per expert with the sentinel numel)."""
    numel = ids.numel()
    flat = ids.reshape(-1).long()
    counts = torch.bincount(flat, minlength=E)
    padded = (counts + bs - 1) // bs * bs
    starts = torch.cumsum(padded, 0) - padded
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    cstart = torch.cumsum(counts, 0) - counts
    dest = starts[sorted_e] + torch.arange(numel, device=ids.device) - cstart[sorted_e]
    cap = numel + min(numel, E) * (bs - 1)
    s = torch.full((cap,), numel, dtype=torch.int32, device=ids.device)
    s[dest] = order.to(torch.int32)
    post = int(padded.sum())
    pos = torch.full((numel,), -1, dtype=torch.int32, device=ids.device)
    pos[order] = dest.to(torch.int32)
    return s, post, pos, cap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", help="libmoe_routing.so of a CUDA build (BUILD_SHARED_LIBS=ON): time moe_permute/combine")
    ap.add_argument("--quick", action="store_true", help="no 16384-token shapes")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    lib = None
    if a.lib:
        lib = C.CDLL(a.lib)
        lib.moe_permute.argtypes = [C.c_void_p, C.c_int, C.c_int64, C.c_int64, C.c_int32, C.c_void_p, C.c_void_p,
                                    C.c_int64, C.c_void_p, C.c_void_p]
        lib.moe_combine.argtypes = [C.c_void_p, C.c_int, C.c_int, C.c_int64, C.c_int32, C.c_int64, C.c_void_p,
                                    C.c_void_p, C.c_float, C.c_void_p, C.c_void_p]
        lib.moe_permute.restype = lib.moe_combine.restype = C.c_int
        lib.moe_last_error.restype = C.c_char_p

    def ok(st):
        if st != 0:
            raise RuntimeError(lib.moe_last_error().decode())

    def stream():
        return C.c_void_p(torch.cuda.current_stream().cuda_stream)

    E, bs = 256, 64
    elt = torch.empty(0, dtype=dt).element_size()
    g = torch.Generator(device="cuda")
    g.manual_seed(5)
    rows_out = []
    print("device: %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    print("%-8s %-20s %8s | %12s %12s %12s %12s | %s" % ("op", "shape", "rows", "torch A us", "torch B us",
                                                           "moe us", "copy us", "A/moe  B/moe  copy/moe"))
    for k in (2, 8):
        for H in (2048, 4096, 7168):
            for T in (1, 4096, 16384):
                if a.quick and T == 16384:
                    continue
                numel = T * k
                ids = torch.rand(T, E, generator=g, device="cuda").topk(k, dim=1).indices.to(torch.int32)
                s, post, pos, cap = align_layout(ids, E, bs)
                post_t = torch.tensor([post], dtype=torch.int32, device="cuda")
                w = torch.rand(T, k, generator=g, device="cuda", dtype=torch.float32)
                valid = s < numel
                src = torch.where(valid, s.long() // k, torch.zeros_like(s, dtype=torch.long))
                token_of_slot = torch.arange(numel, device="cuda") // k
                # ---- permute --------------------------------------------------------------------------------
                pbytes = (numel + post) * H * elt + (post + 1) * 4
                nsets = max(1, min(8, int(240e6 // pbytes)))
                hs = [torch.randn(T, H, generator=g, device="cuda").to(dt) for _ in range(nsets)]
                ps = [torch.empty(cap, H, device="cuda", dtype=dt) for _ in range(nsets)]
                zero = torch.zeros((), dtype=dt, device="cuda")
                ref = torch.where(valid[:, None], hs[0].index_select(0, src), zero)  # +0 padding, as moe_permute

                def t_index_select(i):
                    torch.index_select(hs[i], 0, src, out=ps[i])

                def t_masked(i):
                    v = s < numel
                    idx = torch.where(v, s.long() // k, torch.zeros_like(s, dtype=torch.long))
                    torch.where(v[:, None], hs[i].index_select(0, idx), zero, out=ps[i])

                def m_permute(i):
                    ok(lib.moe_permute(hs[i].data_ptr(), MOE_DT[dt], T, H, k, s.data_ptr(), post_t.data_ptr(), cap,
                                       ps[i].data_ptr(), stream()))

                r = {"op": "permute", "shape": "%dx%dx%d %s" % (T, k, H, a.dtype), "rows": post, "bytes": pbytes}
                r["torch_index_select_us"] = time_graph([lambda i=i: t_index_select(i % nsets) for i in range(16)])
                r["torch_masked_us"] = time_graph([lambda i=i: t_masked(i % nsets) for i in range(16)])
                if lib:
                    ps[0].fill_(float("nan"))
                    m_permute(0)
                    torch.cuda.synchronize()
                    ivt = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[elt]
                    assert torch.equal(ps[0][:post].view(ivt), ref[:post].view(ivt)), "moe_permute differs"
                    r["moe_us"] = time_graph([lambda i=i: m_permute(i % nsets) for i in range(16)])
                half = pbytes // 2
                srcs = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(nsets)]
                dsts = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(nsets)]
                r["copy_us"] = time_graph([lambda i=i: dsts[i % nsets].copy_(srcs[i % nsets]) for i in range(16)])
                rows_out.append(r)
                del hs, ps, srcs, dsts
                # ---- combine --------------------------------------------------------------------------------
                cbytes = (numel + T) * H * elt + numel * 8
                nsets = max(1, min(8, int(240e6 // cbytes)))
                xs = [torch.randn(max(post, 1), H, generator=g, device="cuda").to(dt) for _ in range(nsets)]
                os_ = [torch.empty(T, H, device="cuda", dtype=dt) for _ in range(nsets)]
                posl = pos.long()
                row_of_slot = posl  # every slot present here (no expert parallelism)
                w_flat = w.reshape(-1)

                def t_gather_sum(i):
                    x = xs[i].index_select(0, posl).view(T, k, H).float()
                    os_[i].copy_((x * w[:, :, None]).sum(1))

                def t_index_add(i):
                    acc = torch.zeros(T, H, device="cuda", dtype=torch.float32)
                    acc.index_add_(0, token_of_slot, xs[i].index_select(0, row_of_slot).float() * w_flat[:, None])
                    os_[i].copy_(acc)

                def m_combine(i):
                    ok(lib.moe_combine(xs[i].data_ptr(), MOE_DT[dt], MOE_ROWS_PERMUTED, T, k, H, pos.data_ptr(),
                                       w.data_ptr(), 1.0, os_[i].data_ptr(), stream()))

                r = {"op": "combine", "shape": "%dx%dx%d %s" % (T, k, H, a.dtype), "rows": post, "bytes": cbytes}
                r["torch_gather_sum_us"] = time_graph([lambda i=i: t_gather_sum(i % nsets) for i in range(16)])
                r["torch_index_add_us"] = time_graph([lambda i=i: t_index_add(i % nsets) for i in range(16)])
                if lib:
                    m_combine(0)
                    torch.cuda.synchronize()
                    want = torch.zeros(T, H, device="cuda", dtype=torch.float32)
                    xg = xs[0].index_select(0, posl).view(T, k, H).float()
                    for j in range(k):  # fp32, k in order, product rounded before the add
                        want = want + (xg[:, j] * w[:, j:j + 1])
                    assert torch.equal(os_[0], want.to(dt)), "moe_combine differs from the sequential fp32 sum"
                    r["moe_us"] = time_graph([lambda i=i: m_combine(i % nsets) for i in range(16)])
                half = cbytes // 2
                srcs = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(nsets)]
                dsts = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(nsets)]
                r["copy_us"] = time_graph([lambda i=i: dsts[i % nsets].copy_(srcs[i % nsets]) for i in range(16)])
                rows_out.append(r)
                del xs, os_, srcs, dsts
                torch.cuda.empty_cache()
                for r in rows_out[-2:]:
                    ta = r.get("torch_index_select_us", r.get("torch_gather_sum_us"))
                    tb = r.get("torch_masked_us", r.get("torch_index_add_us"))
                    mu = r.get("moe_us")
                    print("%-8s %-20s %8d | %12.3f %12.3f %12s %12.3f | %s" % (
                        r["op"], r["shape"], r["rows"], ta, tb, "%.3f" % mu if mu else "-", r["copy_us"],
                        "%.2f   %.2f   %.2f" % (ta / mu, tb / mu, r["copy_us"] / mu) if mu else "-"), flush=True)
    print("A: permute index_select / combine gather+sum; B: permute masked / combine index_add_")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows_out, f, indent=1)


if __name__ == "__main__":
    main()
