#!/usr/bin/env python3
"""Side-by-side harness: moe-routing (ctypes on libmoe_routing.so) vs vLLM, SGLang (ctypes on libpeers.so, kernels
verbatim from their public source, see BUILD.md) vs pure PyTorch, all captured with torch.cuda.graph in this one
process, after checking every implementation's output.

  python3 bench.py [PART ...] [--quick] [--out DIR] [--budget SECONDS] [--passes N]
  PART: floors align sum gating datapath align_ep route client   (default: floors align sum gating datapath
        align_ep route; `--parts a,b` is accepted too)

Method: a CUDA graph of 16 calls rotating up to 8 input sets, replayed in batches of a few ms, median of the
per-call times of the batches. Each part checks outputs first, then times; each part (and each implementation
within it) fails on its own: an error is recorded in results.json and the run goes on. results.json is rewritten
after every shape; --budget stops starting new shapes when the time is spent (what was skipped is recorded).
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time
import traceback

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = time.time()
DEADLINE = [float("inf")]


def log(*a):
    print(*a, flush=True)


def time_left():
    return DEADLINE[0] - time.time()


def out_of_time(reserve=5.0):
    return time_left() < reserve


# ----------------------------------------------------------------------------------------------------------------
# libraries (every symbol optional: a missing one disables what needs it, with a message)
# ----------------------------------------------------------------------------------------------------------------
C = ctypes
MISSING = []


def _load(name, required=True):
    path = os.path.join(HERE, "bin", name)
    try:
        return C.CDLL(path)
    except OSError as ex:
        if not required:  # without the peers' library: the project and torch only, peer columns n/a
            log("WARNING: cannot load %s (%s): peer kernels skipped" % (path, ex))
            return None
        log("FATAL: cannot load %s: %s" % (path, ex))
        sys.exit(3)


proj = _load("libmoe_routing.so")
peers = _load("libpeers.so", required=False)


class _Missing:
    def __init__(self, name):
        self.name = name

    def __call__(self, *a, **k):
        raise Unsupported("symbol %s missing from the library" % self.name)


def _bind(lib, name, argtypes, restype=C.c_int):
    try:
        f = getattr(lib, name)
    except AttributeError:
        MISSING.append(name)
        return _Missing(name)
    f.argtypes = argtypes
    f.restype = restype
    return f


vp, i32, i64, sz, f32, f64 = C.c_void_p, C.c_int32, C.c_int64, C.c_size_t, C.c_float, C.c_double
ci = C.c_int


class MoeGate(C.Structure):
    """moe_gate_t of routing.h"""
    _fields_ = [("topk", C.c_int32), ("score", C.c_int), ("num_groups", C.c_int32), ("topk_groups", C.c_int32),
                ("correction_bias", C.c_void_p), ("renormalize", C.c_int32), ("routed_scaling_factor", C.c_float)]


P = {}  # project functions
P["moe_align_max_padded"] = _bind(proj, "moe_align_max_padded", [i64, i32, i32], i64)
P["moe_align_max_blocks"] = _bind(proj, "moe_align_max_blocks", [i64, i32, i32], i64)
P["moe_align_workspace_size"] = _bind(proj, "moe_align_workspace_size", [i64, i32, i32, C.POINTER(sz)])
P["moe_align_block_size"] = _bind(proj, "moe_align_block_size", [vp, ci, i64, i32, i32, vp, vp, vp, vp, sz, vp])
P["moe_align_workspace_size_ep"] = _bind(proj, "moe_align_workspace_size_ep", [i64, i32, i32, i32, C.POINTER(sz)])
P["moe_align_block_size_ep"] = _bind(proj, "moe_align_block_size_ep",
                                     [vp, ci, i64, i32, vp, i32, i32, vp, vp, vp, vp, vp, vp, sz, vp])
P["moe_sum"] = _bind(proj, "moe_sum", [vp, ci, i64, i32, i64, vp, vp])
P["moe_permute"] = _bind(proj, "moe_permute", [vp, ci, i64, i64, i32, vp, vp, i64, vp, vp])
P["moe_combine"] = _bind(proj, "moe_combine", [vp, ci, ci, i64, i32, i64, vp, vp, f32, vp, vp])
P["moe_topk_gating"] = _bind(proj, "moe_topk_gating", [vp, ci, i64, i32, C.POINTER(MoeGate), vp, vp, vp])
P["moe_route_workspace_size"] = _bind(proj, "moe_route_workspace_size",
                                      [i64, i32, C.POINTER(MoeGate), i32, i32, C.POINTER(sz)])
P["moe_route"] = _bind(proj, "moe_route", [vp, ci, i64, i32, C.POINTER(MoeGate), vp, i32, i32, vp, vp, vp, vp, vp,
                                           vp, vp, sz, vp])
P["moe_last_error"] = _bind(proj, "moe_last_error", [], C.c_char_p)
P["moe_backend_name"] = _bind(proj, "moe_backend_name", [], C.c_char_p)
P["moe_backend_check"] = _bind(proj, "moe_backend_check", [], C.c_int)

Q = {}  # peer functions
Q["vllm_moe_align_block_size"] = _bind(peers, "vllm_moe_align_block_size",
                                       [vp, ci, i64, i64, i64, i64, vp, i64, vp, vp, vp, vp])
Q["vllm_moe_align_block_size_ep"] = _bind(peers, "vllm_moe_align_block_size_ep",
                                          [vp, ci, i64, i64, i64, i64, vp, i64, vp, vp, vp, vp, vp])
Q["sgl_moe_align_block_size"] = _bind(peers, "sgl_moe_align_block_size",
                                      [vp, ci, i64, i64, i64, vp, i64, vp, vp, vp, ci, vp])
Q["vllm_moe_sum"] = _bind(peers, "vllm_moe_sum", [vp, vp, ci, i64, ci, ci, vp])
Q["sgl_moe_sum"] = _bind(peers, "sgl_moe_sum", [vp, vp, ci, i64, ci, ci, vp])
Q["empty_launch"] = _bind(peers, "empty_launch", [ci, vp])
Q["peers_last_error"] = _bind(peers, "peers_last_error", [], C.c_char_p)
Q["vllm_topk_softmax"] = _bind(peers, "vllm_topk_softmax",
                               [vp, ci, i64, ci, ci, vp, vp, vp, vp, ci, vp, ci, f64, vp])
Q["vllm_topk_gating_workspace_elems"] = _bind(peers, "vllm_topk_gating_workspace_elems", [i64, ci], ci)
Q["vllm_grouped_topk"] = _bind(peers, "vllm_grouped_topk", [vp, ci, i64, i64, i64, i64, i64, ci, f64, vp, i64, vp,
                                                            vp, vp])
Q["sgl_moe_fused_gate"] = _bind(peers, "sgl_moe_fused_gate", [vp, vp, ci, i64, i64, i64, i64, i64, i64, f64, ci, vp,
                                                              vp, vp])
Q["vllm_moe_permute_sort_workspace_size"] = _bind(peers, "vllm_moe_permute_sort_workspace_size", [i64, i64], i64)
Q["vllm_moe_permute"] = _bind(peers, "vllm_moe_permute", [vp, ci, i64, i64, vp, vp, vp, i64, i64, i64, vp, vp, vp, vp,
                                                          vp, i64, vp, vp, vp, vp])
Q["vllm_moe_unpermute"] = _bind(peers, "vllm_moe_unpermute", [vp, ci, vp, vp, vp, i64, i64, i64, i64, vp, vp])


class _Lib:
    """proj.NAME / peers.NAME access to the bound functions (keeps the older code below unchanged)."""

    def __init__(self, d):
        self.__dict__.update(d)


proj = _Lib(P)
peers = _Lib(Q)
if MISSING:
    log("WARNING: symbols missing (what needs them reports n/a): " + ", ".join(MISSING))

MOE_DT = {torch.int8: 0, torch.uint8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
          torch.float32: 5, torch.float16: 6, torch.bfloat16: 7}
PEER_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


class Unsupported(Exception):
    pass


_DUMP = [None]


def dump():
    if _DUMP[0]:
        _DUMP[0]()


def stream():
    return C.c_void_p(torch.cuda.current_stream().cuda_stream)


def cdiv(a, b):
    return (a + b - 1) // b


def proj_err(st):
    if st != 0:
        raise RuntimeError("moe-routing status %d: %s" % (st, proj.moe_last_error().decode()))


# ----------------------------------------------------------------------------------------------------------------
# align implementations: f(ids [T, k] int32 cuda, block_size, E, poison=False) -> (sorted_ids, expert_ids, ntpp)
# Each allocates its outputs per call (torch.empty), as its Python caller does.
# ----------------------------------------------------------------------------------------------------------------
_proj_sizes = {}


def proj_align(ids, bs, E, poison=False):
    numel = ids.numel()
    key = (numel, E, bs)
    if key not in _proj_sizes:
        cap = proj.moe_align_max_padded(numel, E, bs)
        nb = proj.moe_align_max_blocks(numel, E, bs)
        if cap < 0 or nb < 0:
            raise RuntimeError(proj.moe_last_error().decode())
        ws = C.c_size_t(0)
        proj_err(proj.moe_align_workspace_size(numel, E, bs, C.byref(ws)))
        _proj_sizes[key] = (cap, nb, ws.value)
    cap, nb, wsb = _proj_sizes[key]
    dev = ids.device
    s = torch.empty(cap, dtype=torch.int32, device=dev)
    e = torch.empty(nb, dtype=torch.int32, device=dev)
    n = torch.empty(1, dtype=torch.int32, device=dev)
    ws = torch.empty(max(wsb, 1), dtype=torch.uint8, device=dev)
    if poison:
        s.fill_(-7); e.fill_(-7); n.fill_(-7)
    proj_err(proj.moe_align_block_size(ids.data_ptr(), MOE_DT[ids.dtype], numel, E, bs, s.data_ptr(), e.data_ptr(),
                                       n.data_ptr(), ws.data_ptr() if wsb else None, wsb, stream()))
    return s, e, n


def vllm_align(ids, bs, E, poison=False):
    # caller: vllm/model_executor/layers/fused_moe/moe_align_block_size.py (newest form, with the #29642 cap)
    numel = ids.numel()
    mntp = numel + E * (bs - 1)
    if numel < E:
        mntp = min(numel * bs, mntp)
    dev = ids.device
    s = torch.empty(mntp, dtype=torch.int32, device=dev)
    e = torch.empty(cdiv(mntp, bs), dtype=torch.int32, device=dev)
    n = torch.empty(1, dtype=torch.int32, device=dev)
    if poison:
        s.fill_(-7); e.fill_(-7); n.fill_(-7)
    small = numel < 1024 and E <= 64
    cumsum = None if small else torch.empty(E + 1, dtype=torch.int32, device=dev)  # op: torch::stable::new_empty
    rc = peers.vllm_moe_align_block_size(ids.data_ptr(), ids.element_size(), numel, ids.shape[1], E, bs,
                                         s.data_ptr(), mntp, e.data_ptr(), n.data_ptr(),
                                         cumsum.data_ptr() if cumsum is not None else None, stream())
    if rc == -1000:
        raise Unsupported("vLLM: padded_num_experts must be less than 1024 (STD_TORCH_CHECK)")
    if rc != 0:
        raise RuntimeError("vllm rc %d" % rc)
    return s, e, n


def sgl_align(ids, bs, E, poison=False):
    # caller: sglang/srt/layers/moe/fused_moe_triton/moe_align_block_size.py @ f82ccc94
    numel = ids.numel()
    mntp = numel + (E + 1) * (bs - 1)
    dev = ids.device
    s = torch.empty(mntp, dtype=torch.int32, device=dev)
    e = torch.empty(cdiv(mntp, bs), dtype=torch.int32, device=dev)
    n = torch.empty(1, dtype=torch.int32, device=dev)
    if poison:
        s.fill_(-7); e.fill_(-7); n.fill_(-7)
    cumsum = torch.empty(E + 2, dtype=torch.int32, device=dev)
    fuse = s.shape[0] <= 4096
    if not fuse:
        s.fill_(numel)
    rc = peers.sgl_moe_align_block_size(ids.data_ptr(), ids.element_size(), numel, E + 1, bs, s.data_ptr(), mntp,
                                        e.data_ptr(), n.data_ptr(), cumsum.data_ptr(), int(fuse), stream())
    if rc == -1000:
        raise Unsupported("SGLang: num_experts must be <= 8192")
    if rc != 0:
        raise RuntimeError("sglang rc %d" % rc)
    return s, e, n


def torch_align(ids, bs, E, poison=False):
    """Sync-free, graph-capturable pure PyTorch (no bincount: it syncs). vLLM's sizing."""
    numel = ids.numel()
    mntp = numel + E * (bs - 1)
    if numel < E:
        mntp = min(numel * bs, mntp)
    dev = ids.device
    flat = ids.reshape(-1).long()
    counts = torch.zeros(E, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + bs - 1) // bs * bs
    cum = torch.cumsum(padded, 0)
    starts = cum - padded
    sorted_e, order = torch.sort(flat, stable=True)
    cstart = torch.cumsum(counts, 0) - counts
    dest = starts[sorted_e] + torch.arange(numel, device=dev) - cstart[sorted_e]
    s = torch.full((mntp,), numel, dtype=torch.int32, device=dev)
    s.scatter_(0, dest, order.to(torch.int32))
    nb = cdiv(mntp, bs)
    bstart = torch.arange(nb, device=dev, dtype=torch.int64) * bs
    e = torch.searchsorted(cum, bstart, right=True).to(torch.int32)
    e = torch.where(bstart < cum[-1], e, torch.full_like(e, -1))
    n = cum[-1:].to(torch.int32)
    return s, e, n


ALIGN_IMPLS = [("project", proj_align), ("vllm", vllm_align), ("sglang", sgl_align), ("torch", torch_align)]


# ----------------------------------------------------------------------------------------------------------------
# references and checks (numpy)
# ----------------------------------------------------------------------------------------------------------------
def ref_align(ids_np, E, bs, cap, nb):
    """Stable reference: ids outside [0, E) dropped; sentinel numel; expert_ids tail -1."""
    numel = ids_np.size
    valid = (ids_np >= 0) & (ids_np < E)
    idx = np.nonzero(valid)[0]
    ex = ids_np[idx]
    order = np.argsort(ex, kind="stable")
    idx_s, e_s = idx[order], ex[order]
    counts = np.bincount(ex, minlength=E)
    padded = (counts + bs - 1) // bs * bs
    starts = np.concatenate([[0], np.cumsum(padded)[:-1]])
    cstart = np.concatenate([[0], np.cumsum(counts)[:-1]])
    dest = starts[e_s] + np.arange(e_s.size) - cstart[e_s]
    out = np.full(cap, numel, np.int32)
    out[dest] = idx_s
    total = int(padded.sum())
    eids = np.full(nb, -1, np.int32)
    eids[: total // bs] = np.repeat(np.arange(E), padded // bs)
    return out, eids, total


def check_invariants(ids_np, E, bs, s, e, n):
    """Peers: grouping and padding invariants inside [0, num_tokens_post_pad)."""
    numel = ids_np.size
    counts = np.bincount(ids_np, minlength=E)
    padded = (counts + bs - 1) // bs * bs
    total = int(padded.sum())
    errs = []
    if n != total:
        return ["num_tokens_post_pad %d != %d" % (n, total)]
    if s.size < total:
        return ["sorted_ids shorter than total"]
    seg = s[:total].astype(np.int64)
    pos_e = np.repeat(np.arange(E), padded)
    tok = seg != numel
    vals = seg[tok]
    if np.any((vals < 0) | (vals >= numel)):
        errs.append("value out of range (%d)" % int(np.sum((vals < 0) | (vals >= numel))))
    else:
        if np.any(ids_np[vals] != pos_e[tok]):
            errs.append("token in the wrong expert segment")
        sv = np.sort(vals)
        if sv.size != numel or np.any(sv != np.arange(numel)):
            errs.append("token ids not a permutation (%d placed of %d)" % (sv.size, numel))
    nbk = total // bs
    if e.size < nbk or np.any(e[:nbk] != pos_e[::bs]):
        errs.append("expert_ids wrong")
    return errs


def gen_ids(T, k, E, skew, g):
    if skew:
        r = torch.rand(T, k, generator=g, device="cuda")
        o = torch.randint(1, E, (T, k), generator=g, device="cuda", dtype=torch.int32)
        return torch.where(r < 0.5, torch.zeros_like(o), o).contiguous()
    return torch.randint(0, E, (T, k), generator=g, device="cuda", dtype=torch.int32)


# ----------------------------------------------------------------------------------------------------------------
# graph timing
# ----------------------------------------------------------------------------------------------------------------
def time_graph(calls, batch_ms=10.0, batches=7):
    """calls: 16 zero-arg callables, captured into one graph. Returns (median us per call, list of batch values)."""
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
    return statistics.median(vals), vals


# ----------------------------------------------------------------------------------------------------------------
# parts
# ----------------------------------------------------------------------------------------------------------------
def part_env(R):
    p = torch.cuda.get_device_properties(0)
    R["env"] = {
        "device": torch.cuda.get_device_name(0), "sms": p.multi_processor_count,
        "l2_bytes": getattr(p, "L2_cache_size", None), "mem_bytes": p.total_memory,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"), "project_backend": proj.moe_backend_name().decode(),
        "project_backend_check": proj.moe_backend_check(),
    }
    try:
        import triton
        R["env"]["triton"] = triton.__version__
    except Exception as ex:  # noqa
        R["env"]["triton"] = "import failed: %s" % ex
    log("ENV", json.dumps(R["env"]))


def part_floors(R, tag):
    F = {}
    # empty kernel as a graph node (plain launch)
    calls = [lambda: peers.empty_launch(1, stream())] * 16
    F["empty_node_us"], F["empty_node_batches"] = time_graph(calls)
    # the same in a graph of 100 nodes: less of the per-replay launch gap per node
    calls = [lambda: peers.empty_launch(1, stream())] * 100
    F["empty_node100_us"], _ = time_graph(calls)
    # 1 GiB device-to-device copy, bytes read + written
    nb = 1 << 30
    srcs = [torch.empty(nb, dtype=torch.uint8, device="cuda").random_() for _ in range(2)]
    dsts = [torch.empty(nb, dtype=torch.uint8, device="cuda") for _ in range(2)]
    calls = [(lambda i=i: dsts[i % 2].copy_(srcs[i % 2])) for i in range(4)]
    us, _ = time_graph(calls, batch_ms=20, batches=5)
    F["copy_1GiB_us"] = us
    F["copy_1GiB_GBps"] = 2 * nb / (us * 1e-6) / 1e9
    del srcs, dsts
    torch.cuda.empty_cache()
    R.setdefault("floors", {})[tag] = F
    log("FLOORS %s: empty graph node %.3f us (16-node graph), %.3f us (100-node graph), 1 GiB copy %.0f GB/s" % (tag, F["empty_node_us"], F["empty_node100_us"], F["copy_1GiB_GBps"]))


ALIGN_SHAPES = [
    (1, 8, 256, False), (16, 8, 256, False), (256, 8, 256, False), (1024, 8, 256, False), (4096, 8, 256, False),
    (16384, 8, 256, False), (65536, 8, 256, False), (65536, 8, 256, True), (65536, 2, 8, False),
    (4096, 8, 64, False), (4096, 8, 128, False), (4096, 8, 512, False), (256, 8, 1024, False),
    (4096, 8, 1024, False),
]
BS = 64


def shape_name(T, k, E, skew):
    return "%dx%d/%d%s" % (T, k, E, " skew" if skew else "")


def part_align_check(R):
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    out = {}
    for (T, k, E, skew) in ALIGN_SHAPES:
        name = shape_name(T, k, E, skew)
        if out_of_time(20):
            skip_note("align check", name)
            continue
        res = {}
        for impl, fn in ALIGN_IMPLS:
            r = {"draws": 0, "errors": [], "deterministic": None, "unsupported": None}
            try:
                det_all = True
                for d in range(3):
                    ids = gen_ids(T, k, E, skew, g)
                    ids_np = ids.cpu().numpy().reshape(-1).astype(np.int64)
                    outs = []
                    for rep in range(2):
                        s, e, n = fn(ids, BS, E, poison=True)
                        torch.cuda.synchronize()
                        outs.append((s.cpu().numpy(), e.cpu().numpy(), int(n.cpu().item())))
                    s_np, e_np, n_v = outs[0]
                    same = (outs[0][0].tobytes() == outs[1][0].tobytes() and
                            outs[0][1].tobytes() == outs[1][1].tobytes() and outs[0][2] == outs[1][2])
                    det_all = det_all and same
                    if impl == "project":
                        rs, re_, rn = ref_align(ids_np, E, BS, s_np.size, e_np.size)
                        if n_v != rn:
                            r["errors"].append("draw %d: ntpp %d != %d" % (d, n_v, rn))
                        if not np.array_equal(s_np, rs):
                            bad = np.nonzero(s_np != rs)[0]
                            r["errors"].append("draw %d: sorted_token_ids differ at %d positions (first %d)"
                                               % (d, bad.size, bad[0]))
                        if not np.array_equal(e_np, re_):
                            bad = np.nonzero(e_np != re_)[0]
                            r["errors"].append("draw %d: expert_ids differ at %d positions (first %d)"
                                               % (d, bad.size, bad[0]))
                        r["capacity"] = [int(s_np.size), int(e_np.size)]
                    else:
                        errs = check_invariants(ids_np, E, BS, s_np, e_np, n_v)
                        r["errors"] += ["draw %d: %s" % (d, x) for x in errs]
                        r["capacity"] = [int(s_np.size), int(e_np.size)]
                    r["draws"] += 1
                r["deterministic"] = det_all
            except Unsupported as ex:
                r["unsupported"] = str(ex)
            except Exception as ex:  # noqa
                r["errors"].append("exception: %r" % (ex,))
                torch.cuda.synchronize()
            res[impl] = r
        out[name] = res
        R["align_check"] = out
        dump()
        log("CHECK %-18s " % name + "  ".join(
            "%s:%s%s" % (i, "n/a" if res[i]["unsupported"] else ("ok" if not res[i]["errors"] else "FAIL"),
                         "" if res[i]["unsupported"] else ("/det" if res[i]["deterministic"] else "/nondet"))
            for i, _ in ALIGN_IMPLS))
        for i, _ in ALIGN_IMPLS:
            for x in res[i]["errors"][:3]:
                log("   %s: %s" % (i, x))
    R["align_check"] = out


def part_align_time(R, passes):
    g = torch.Generator(device="cuda")
    out = R.setdefault("align_time", {})
    for p in range(passes):
        g.manual_seed(100 + p)
        for (T, k, E, skew) in ALIGN_SHAPES:
            name = shape_name(T, k, E, skew)
            if out_of_time(10):
                skip_note("align time pass %d" % p, name)
                continue
            sets = [gen_ids(T, k, E, skew, g) for _ in range(8)]
            row = out.setdefault(name, {})
            for impl, fn in ALIGN_IMPLS:
                if isinstance(row.get(impl), str):  # unsupported / failed in an earlier pass
                    continue
                calls = [(lambda i=i, fn=fn: fn(sets[i % 8], BS, E)) for i in range(16)]
                try:
                    us, vals = time_graph(calls)
                    row.setdefault(impl, []).append({"us": us, "batches": vals})
                except Unsupported as ex:
                    row[impl] = "n/a: " + str(ex)
                except Exception as ex:  # noqa
                    row[impl] = "error: %r" % (ex,)
                    torch.cuda.synchronize()
            torch.cuda.empty_cache()
            dump()
            log("TIME pass %d %-18s " % (p, name) + "  ".join(
                "%s %s" % (i, ("%.2f" % row[i][-1]["us"]) if isinstance(row[i], list) else row[i][:20])
                for i, _ in ALIGN_IMPLS))


SUM_SHAPES = [(1, 8, 4096), (4096, 2, 2048), (4096, 2, 4096), (4096, 8, 4096), (4096, 8, 7168)]
SUM_DTYPES = [torch.bfloat16, torch.float32]


def proj_sum(x, o):
    proj_err(proj.moe_sum(x.data_ptr(), MOE_DT[x.dtype], x.shape[0], x.shape[1], x.shape[2], o.data_ptr(), stream()))


def vllm_sum(x, o):
    rc = peers.vllm_moe_sum(x.data_ptr(), o.data_ptr(), PEER_DT[x.dtype], x.shape[0], x.shape[1], x.shape[2],
                            stream())
    if rc:
        raise RuntimeError("vllm moe_sum rc %d" % rc)


def sgl_sum(x, o):
    rc = peers.sgl_moe_sum(x.data_ptr(), o.data_ptr(), PEER_DT[x.dtype], x.shape[0], x.shape[1], x.shape[2],
                           stream())
    if rc:
        raise RuntimeError("sglang moe_sum rc %d" % rc)


def torch_sum(x, o):
    torch.sum(x, dim=1, out=o)


SUM_IMPLS = [("project", proj_sum), ("vllm", vllm_sum), ("sglang", sgl_sum), ("torch", torch_sum)]


def part_sum(R):
    out = R.setdefault("sum", {})
    g = torch.Generator(device="cuda")
    g.manual_seed(7)
    for dt in SUM_DTYPES:
        for (T, k, H) in SUM_SHAPES:
            name = "%dx%dx%d %s" % (T, k, H, str(dt).replace("torch.", ""))
            if out_of_time(15):
                skip_note("sum", name)
                continue
            elt = torch.empty(0, dtype=dt).element_size()
            nbytes = (T * k * H + T * H) * elt
            set_bytes = nbytes
            nsets = 8 if set_bytes * 8 <= (2 << 30) else max(2, (2 << 30) // set_bytes)
            xs = [torch.randn(T, k, H, generator=g, device="cuda", dtype=torch.float32).to(dt) for _ in range(nsets)]
            os_ = [torch.empty(T, H, device="cuda", dtype=dt) for _ in range(nsets)]
            row = {"bytes": nbytes, "sets": nsets}
            # exact reference: fp32, k ascending, no FMA, one rounding
            x0 = xs[0]
            acc = x0[:, 0].float().clone()
            for j in range(1, k):
                acc = acc + x0[:, j].float()
            ref = acc.to(dt)
            ref64 = x0.double().sum(1)
            ivt = torch.int16 if elt == 2 else torch.int32
            for impl, fn in SUM_IMPLS:
                try:
                    o = torch.full((T, H), float("nan"), device="cuda", dtype=dt)
                    fn(x0, o)
                    torch.cuda.synchronize()
                    bit = bool(torch.equal(o.view(ivt), ref.view(ivt)))
                    rel = float((o.double() - ref64).norm() / ref64.norm())
                    nan = bool(torch.isnan(o).any())
                    calls = [(lambda i=i, fn=fn: fn(xs[i % nsets], os_[i % nsets])) for i in range(16)]
                    us, vals = time_graph(calls, batch_ms=20, batches=7)
                    row[impl] = {"us": us, "batches": vals, "bit_exact_fp32_seq": bit, "rel_err_vs_fp64": rel,
                                 "nan": nan, "GBps": nbytes / (us * 1e-6) / 1e9}
                except Exception as ex:  # noqa  (one implementation failing does not stop the others)
                    log("SUM %s %s ERROR %r" % (name, impl, ex))
                    try:
                        torch.cuda.synchronize()
                    except Exception:  # noqa
                        pass
                    row[impl] = {"us": float("nan"), "batches": [], "bit_exact_fp32_seq": False,
                                 "rel_err_vs_fp64": float("nan"), "nan": True, "GBps": float("nan"),
                                 "error": repr(ex)}
            # copy of the same bytes: half read, half written
            half = nbytes // 2
            srcs = [torch.empty(half, dtype=torch.uint8, device="cuda").random_() for _ in range(nsets)]
            dsts = [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(nsets)]
            calls = [(lambda i=i: dsts[i % nsets].copy_(srcs[i % nsets])) for i in range(16)]
            us, vals = time_graph(calls, batch_ms=20, batches=7)
            row["copy"] = {"us": us, "batches": vals, "GBps": nbytes / (us * 1e-6) / 1e9}
            out[name] = row
            dump()
            log("SUM %-22s " % name + "  ".join(
                "%s %.2f%s" % (i, row[i]["us"], "" if i == "copy" else ("=" if row[i]["bit_exact_fp32_seq"] else "~"))
                for i in ["project", "vllm", "sglang", "torch", "copy"]))
            del xs, os_, srcs, dsts
            torch.cuda.empty_cache()


def part_client(R):
    sys.path.insert(0, HERE)
    import fused_moe_triton as fm
    import torch.nn.functional as F
    out = R.setdefault("client", {})
    g = torch.Generator(device="cuda")
    g.manual_seed(99)
    K, I = 1024, 512
    for E in (8, 64, 256):
        w1 = (torch.randn(E, 2 * I, K, generator=g, device="cuda") / math.sqrt(K)).to(torch.bfloat16)
        w2 = (torch.randn(E, K, I, generator=g, device="cuda") / math.sqrt(I)).to(torch.bfloat16)
        for topk in (2, 8):
            for M in (1, 7, 256, 4096):
                name = "E=%d topk=%d tokens=%d" % (E, topk, M)
                x = torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16)
                logits = torch.randn(M, E, generator=g, device="cuda")
                wts, ids = torch.topk(torch.softmax(logits, -1), topk, dim=-1)
                wts = (wts / wts.sum(-1, keepdim=True)).float().contiguous()
                ids = ids.to(torch.int32).contiguous()

                def reference(ids_used):
                    ref = torch.zeros(M, K, device="cuda", dtype=torch.float64)
                    xf = x.double()
                    for e in range(E):
                        t, kk = torch.nonzero(ids_used == e, as_tuple=True)
                        if t.numel() == 0:
                            continue
                        h = xf[t] @ w1[e].double().t()
                        a = F.silu(h[:, :I]) * h[:, I:]
                        y = a @ w2[e].double().t()
                        ref.index_add_(0, t, y * wts[t, kk].double()[:, None])
                    return ref

                def errs(o, ref):
                    d = (o.double() - ref)
                    return {"max_abs": float(d.abs().max()), "rel_norm": float(d.norm() / ref.norm()),
                            "max_abs_ref": float(ref.abs().max()), "nan": bool(torch.isnan(o).any())}

                r = {}
                try:
                    ref = reference(ids)
                    o_p, bm = fm.moe_forward(x, w1, w2, wts, ids, lambda t, b, e: proj_align(t, b, e))
                    o_v, _ = fm.moe_forward(x, w1, w2, wts, ids, lambda t, b, e: vllm_align(t, b, e))
                    torch.cuda.synchronize()
                    r["block_size_m"] = bm
                    r["project"] = errs(o_p, ref)
                    r["vllm_align"] = errs(o_v, ref)
                    r["project_vs_vllm_bit_identical"] = bool(torch.equal(o_p.view(torch.int16), o_v.view(torch.int16)))
                    r["project_vs_vllm_max_abs"] = float((o_p.float() - o_v.float()).abs().max())
                    # expert parallel: the upper half of the experts belongs to another rank -> ids -1
                    ids_ep = torch.where(ids >= E // 2, torch.full_like(ids, -1), ids)
                    ref_ep = reference(ids_ep)
                    o_ep, _ = fm.moe_forward(x, w1, w2, wts, ids_ep, lambda t, b, e: proj_align(t, b, e),
                                             zero_cache3=True)
                    torch.cuda.synchronize()
                    r["ep_project"] = errs(o_ep, ref_ep)
                    r["ep_local_slots"] = int((ids_ep >= 0).sum())
                except Exception as ex:  # noqa
                    r["error"] = repr(ex)
                    torch.cuda.synchronize()
                out[name] = r
                dump()
                if "error" in r:
                    log("CLIENT %-28s ERROR %s" % (name, r["error"]))
                else:
                    log("CLIENT %-28s BM=%d proj rel %.2e max %.2e | vllm-align rel %.2e | bit-eq %s | EP rel %.2e max %.2e"
                        % (name, r["block_size_m"], r["project"]["rel_norm"], r["project"]["max_abs"],
                           r["vllm_align"]["rel_norm"], r["project_vs_vllm_bit_identical"],
                           r["ep_project"]["rel_norm"], r["ep_project"]["max_abs"]))
        del w1, w2
        torch.cuda.empty_cache()




# ================================================================================================================
# helpers for the parts below
# ================================================================================================================
SKIPPED = []


def skip_note(part, what):
    SKIPPED.append("%s: %s" % (part, what))
    log("SKIP %s %s (time budget)" % (part, what))


def peer_err(rc, who):
    if rc == -1000:
        msg = peers.peers_last_error()
        raise Unsupported("%s: %s" % (who, msg.decode() if msg else "unsupported"))
    if rc != 0:
        msg = peers.peers_last_error()
        raise RuntimeError("%s rc %d %s" % (who, rc, msg.decode() if msg else ""))


def ptr(t):
    return None if t is None else t.data_ptr()


def pdt(dt):
    return PEER_DT[dt]


def dtname(dt):
    return str(dt).replace("torch.", "")


def n_sets(set_bytes, budget=6 << 30, most=8):
    return int(max(2, min(most, budget // max(set_bytes, 1))))


def time_impls(row, impls, nsets, batch_ms=5.0, batches=5):
    """impls: list of (name, fn(i) or None/str). Fills row[name] = {"us", "batches"} or a string."""
    for name, fn in impls:
        if fn is None or isinstance(fn, str):
            row[name] = fn if isinstance(fn, str) else "n/a"
            continue
        calls = [(lambda i=i, fn=fn: fn(i % nsets)) for i in range(16)]
        try:
            us, vals = time_graph(calls, batch_ms=batch_ms, batches=batches)
            row[name] = {"us": us, "batches": vals}
        except Unsupported as ex:
            row[name] = "n/a: %s" % ex
        except Exception as ex:  # noqa
            row[name] = "error: %r" % (ex,)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa
                pass


def fmt_row(row, names):
    out = []
    for n in names:
        v = row.get(n)
        if isinstance(v, dict) and "us" in v:
            out.append("%s %.2f" % (n, v["us"]))
        elif v is None:
            out.append("%s -" % n)
        else:
            out.append("%s %s" % (n, str(v)[:24]))
    return "  ".join(out)


def run_check(fn):
    """Runs fn() -> dict, catching errors into the dict."""
    try:
        r = fn()
        torch.cuda.synchronize()
        return r
    except Unsupported as ex:
        return {"unsupported": str(ex)}
    except Exception as ex:  # noqa
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa
            pass
        return {"error": repr(ex), "trace": traceback.format_exc()[-1500:]}


def check_layout(local_np, L, bs, s, e, n, dump_first=False):
    """Grouping/padding invariants of an align output for local ids (-1 = dropped). dump_first: SGLang's layout,
    the dropped entries form a bucket of expert -1 in front."""
    numel = local_np.size
    valid = local_np >= 0
    counts = np.bincount(local_np[valid], minlength=L)[:L]
    padded = (counts + bs - 1) // bs * bs
    p0 = 0
    errs = []
    if dump_first:
        nrem = int((~valid).sum())
        p0 = (nrem + bs - 1) // bs * bs
    total = p0 + int(padded.sum())
    if n != total:
        return ["num_tokens_post_pad %d != %d" % (n, total)]
    if s.size < total:
        return ["sorted_ids shorter than total"]
    if p0:
        seg0 = s[:p0].astype(np.int64)
        v0 = np.sort(seg0[seg0 != numel])
        if v0.size != int((~valid).sum()) or np.any(v0 != np.nonzero(~valid)[0]):
            errs.append("dropped-entries bucket wrong")
        if np.any(e[:p0 // bs] != -1):
            errs.append("dropped bucket's expert_ids not -1")
    seg = s[p0:total].astype(np.int64)
    pos_e = np.repeat(np.arange(L), padded)
    tok = seg != numel
    vals = seg[tok]
    if np.any((vals < 0) | (vals >= numel)):
        errs.append("value out of range (%d)" % int(np.sum((vals < 0) | (vals >= numel))))
    else:
        if np.any(local_np[vals] != pos_e[tok]):
            errs.append("entry in the wrong expert segment")
        want = np.nonzero(valid)[0]
        sv = np.sort(vals)
        if sv.size != want.size or np.any(sv != want):
            errs.append("entries not exactly the kept ones (%d placed of %d)" % (sv.size, want.size))
    nb0, nbk = p0 // bs, total // bs
    if e.size < nbk or np.any(e[nb0:nbk] != pos_e[::bs]):
        errs.append("expert_ids wrong")
    return errs


def proj_sizes(numel, L, bs):
    cap = proj.moe_align_max_padded(numel, L, bs)
    nb = proj.moe_align_max_blocks(numel, L, bs)
    if cap < 0 or nb < 0:
        raise RuntimeError(proj.moe_last_error().decode())
    return cap, nb


def proj_ws_ep(numel, E, L, bs):
    ws = C.c_size_t(0)
    proj_err(proj.moe_align_workspace_size_ep(numel, E, L, bs, C.byref(ws)))
    return ws.value


def dev_ws(nbytes):
    # 256-aligned (the caching allocator gives 512-byte aligned blocks)
    return torch.empty(max(int(nbytes), 256), dtype=torch.uint8, device="cuda")


def vllm_capacity(numel, E, bs):
    m = numel + E * (bs - 1)
    if numel < E:
        m = min(numel * bs, m)
    return m


# ================================================================================================================
# gating: softmax top-k and the DeepSeek-V3 grouped router
# ================================================================================================================
GATING_SOFTMAX = [(8, 2), (64, 6), (128, 8), (256, 8)]
GATING_TOKENS = [1, 64, 1024, 4096, 16384]
GATING_DTYPES = [torch.float32, torch.bfloat16]
DSV3 = dict(E=256, groups=8, topk_group=4, topk=8, rsf=2.5)


def ref_softmax_topk(logits, k):
    """fp64 reference: ids, renormalized weights, selection margin (k-th minus (k+1)-th probability)."""
    p = torch.softmax(logits.double(), -1)
    v, ids = torch.topk(p, min(k + 1, p.shape[1]), dim=-1)
    w = v[:, :k] / v[:, :k].sum(-1, keepdim=True)
    margin = (v[:, k - 1] - v[:, k]) if p.shape[1] > k else torch.full_like(v[:, 0], float("inf"))
    return ids[:, :k], w, margin


def ref_grouped(logits, bias, G, tg, k, rsf):
    """fp64 DeepSeek-V3 reference: sigmoid, + bias for selection, groups by the sum of their 2 best, renorm, rsf."""
    T, E = logits.shape
    s = torch.sigmoid(logits.double())
    b = s + bias.double()[None, :]
    gs = b.view(T, G, -1).topk(2, dim=-1)[0].sum(-1)
    gv, gi = gs.topk(min(tg + 1, G), dim=-1)
    gmargin = (gv[:, tg - 1] - gv[:, tg]) if G > tg else torch.full_like(gv[:, 0], float("inf"))
    mask = torch.zeros(T, G, dtype=torch.bool, device=logits.device).scatter_(1, gi[:, :tg], True)
    mask = mask[:, :, None].expand(T, G, E // G).reshape(T, E)
    bm = b.masked_fill(~mask, float("-inf"))
    ev, ids = bm.topk(k + 1, dim=-1)
    emargin = ev[:, k - 1] - ev[:, k]
    emargin = torch.where(torch.isinf(emargin), torch.full_like(emargin, float("inf")), emargin)
    w = s.gather(1, ids[:, :k])
    w = w / w.sum(-1, keepdim=True) * rsf
    return ids[:, :k], w, torch.minimum(gmargin, emargin)


def compare_topk(ids, w, ref_ids, ref_w, margin, E, thr):
    ids = ids.long()
    r = {}
    r["ids_valid"] = bool(((ids >= 0) & (ids < E)).all())
    si, oi = ids.sort(1)
    r["ids_distinct"] = bool((si[:, 1:] != si[:, :-1]).all()) if ids.shape[1] > 1 else True
    sw = w.double().gather(1, oi)
    ri, orr = ref_ids.sort(1)
    rw = ref_w.gather(1, orr)
    same = (si == ri).all(1)
    r["tokens"] = int(ids.shape[0])
    r["id_set_mismatch"] = int((~same).sum())
    r["id_set_mismatch_clear"] = int((~same & (margin > thr)).sum())
    r["tie_threshold"] = thr
    if bool(same.any()):
        d = (sw - rw).abs()[same]
        r["w_max_abs_err"] = float(d.max())
        r["w_max_rel_err"] = float((d / rw[same].abs().clamp_min(1e-30)).max())
    else:
        r["w_max_abs_err"] = None
    wd = w.double()
    r["w_descending"] = bool((wd[:, 1:] <= wd[:, :-1] + 1e-12).all()) if w.shape[1] > 1 else True
    r["nan"] = bool(torch.isnan(w).any())
    return r


def verdict(r, w_tol):
    if not isinstance(r, dict):
        return "?"
    if "error" in r:
        return "ERROR"
    if "unsupported" in r:
        return "n/a"
    ok = r["ids_valid"] and r["ids_distinct"] and r["id_set_mismatch_clear"] == 0 and not r["nan"] and \
        (r["w_max_abs_err"] is None or r["w_max_abs_err"] <= w_tol)
    return ("ok" if ok else "FAIL") + "(%d/%d ties)" % (r["id_set_mismatch"], r["tokens"])


def gate_struct(k, score, groups=1, topk_groups=1, bias=None, renorm=1, rsf=1.0):
    g = MoeGate()
    g.topk, g.score, g.num_groups, g.topk_groups = k, score, groups, topk_groups
    g.correction_bias = ptr(bias)
    g.renormalize, g.routed_scaling_factor = renorm, rsf
    return g


def part_gating(R, quick):
    out = R.setdefault("gating", {})
    chk = R.setdefault("gating_check", {})
    g = torch.Generator(device="cuda")
    g.manual_seed(4321)
    tokens = [1, 1024, 16384] if quick else GATING_TOKENS
    dtypes = GATING_DTYPES
    cases = [("softmax", E, k) for (E, k) in (GATING_SOFTMAX if not quick else [(8, 2), (128, 8), (256, 8)])]
    cases.append(("dsv3", DSV3["E"], DSV3["topk"]))
    for kind, E, k in cases:
        # the DeepSeek bias (fp32, as the models hold it; made bf16-representable so that any bf16 use agrees)
        bias = (torch.randn(E, generator=g, device="cuda") * 0.05).to(torch.bfloat16).float() if kind == "dsv3" \
            else None
        for dt in dtypes:
            for T in tokens:
                if out_of_time(20):
                    skip_note("gating", "%s E=%d T=%d %s" % (kind, E, T, dtname(dt)))
                    continue
                name = "%s E=%d topk=%d T=%d %s" % (kind, E, k, T, dtname(dt))
                nsets = n_sets(T * E * 4 * 3, budget=1 << 30)
                logits = [torch.randn(T, E, generator=g, device="cuda").to(dt) for _ in range(nsets)]
                ids_o = [torch.empty(T, k, dtype=torch.int32, device="cuda") for _ in range(nsets)]
                w_o = [torch.empty(T, k, dtype=torch.float32, device="cuda") for _ in range(nsets)]
                tei = torch.empty(T, k, dtype=torch.int32, device="cuda")
                if kind == "softmax":
                    gate = gate_struct(k, 0, renorm=1, rsf=1.0)
                else:
                    gate = gate_struct(k, 1, DSV3["groups"], DSV3["topk_group"], bias, 1, DSV3["rsf"])
                vws_n = peers.vllm_topk_gating_workspace_elems(T, E) if kind == "softmax" else 0
                vws = torch.empty(max(vws_n, 1), dtype=torch.float32, device="cuda") if vws_n else None

                def f_proj(i, gate=gate):
                    proj_err(proj.moe_topk_gating(logits[i].data_ptr(), MOE_DT[dt], T, E, C.byref(gate),
                                                  ids_o[i].data_ptr(), w_o[i].data_ptr(), stream()))

                if kind == "softmax":
                    def f_vllm(i):
                        peer_err(peers.vllm_topk_softmax(logits[i].data_ptr(), pdt(dt), T, E, k, w_o[i].data_ptr(),
                                                         ids_o[i].data_ptr(), tei.data_ptr(), ptr(vws), 1, None, 0,
                                                         1.0, stream()), "vllm topk_softmax")
                    f_sgl = "n/a: SGLang softmax top-k not built (not asked)"

                    def f_torch(i):
                        p = torch.softmax(logits[i].float(), -1)
                        v, ix = torch.topk(p, k, dim=-1)
                        w_o[i].copy_(v / v.sum(-1, keepdim=True))
                        ids_o[i].copy_(ix)
                else:
                    def f_vllm(i):
                        peer_err(peers.vllm_grouped_topk(logits[i].data_ptr(), pdt(dt), T, E, DSV3["groups"],
                                                         DSV3["topk_group"], k, 1, DSV3["rsf"], bias.data_ptr(), 1,
                                                         w_o[i].data_ptr(), ids_o[i].data_ptr(), stream()),
                                 "vllm grouped_topk")

                    def f_sgl(i):
                        # as SGLang's caller (biased_grouped_topk_gpu): moe_fused_gate(gating_output.to(float32),
                        # correction_bias, ...): the cast is part of its cost for bf16 logits
                        x = logits[i].float()
                        peer_err(peers.sgl_moe_fused_gate(x.data_ptr(), bias.data_ptr(), 0, T, E,
                                                          DSV3["groups"], DSV3["topk_group"], k, 0, DSV3["rsf"], 1,
                                                          w_o[i].data_ptr(), ids_o[i].data_ptr(), stream()),
                                 "sglang moe_fused_gate")

                    def f_torch(i):
                        s = logits[i].float().sigmoid()
                        b = s + bias
                        gs = b.view(T, DSV3["groups"], -1).topk(2, dim=-1)[0].sum(-1)
                        gi = gs.topk(DSV3["topk_group"], dim=-1)[1]
                        m = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gi, True)
                        m = m[:, :, None].expand(T, DSV3["groups"], E // DSV3["groups"]).reshape(T, E)
                        ix = b.masked_fill(~m, float("-inf")).topk(k, dim=-1)[1]
                        w = s.gather(1, ix)
                        w_o[i].copy_(w / w.sum(-1, keepdim=True) * DSV3["rsf"])
                        ids_o[i].copy_(ix)

                impls = [("project", f_proj), ("vllm", f_vllm), ("sglang", f_sgl), ("torch", f_torch)]
                # ---- check on set 0
                if kind == "softmax":
                    rids, rw, margin = ref_softmax_topk(logits[0], k)
                else:
                    rids, rw, margin = ref_grouped(logits[0], bias, DSV3["groups"], DSV3["topk_group"], k,
                                                   DSV3["rsf"])
                crow = {}
                for nm, fn in impls:
                    if isinstance(fn, str):
                        crow[nm] = {"unsupported": fn}
                        continue

                    def one(fn=fn, nm=nm):
                        ids_o[0].fill_(-7)
                        w_o[0].fill_(float("nan"))
                        fn(0)
                        torch.cuda.synchronize()
                        sg_bf16 = False  # (SGLang gets fp32 logits, as its caller casts them: same tolerance)
                        thr = 3e-2 if sg_bf16 else 1e-5
                        r = compare_topk(ids_o[0], w_o[0], rids, rw, margin, E, thr)
                        r["w_tol"] = (5e-2 if sg_bf16 else 2e-5) * (DSV3["rsf"] if kind == "dsv3" else 1.0)
                        r["verdict"] = verdict(r, r["w_tol"])
                        if nm == "project":  # determinism: the same bits twice
                            a, b = ids_o[0].clone(), w_o[0].clone()
                            fn(0)
                            torch.cuda.synchronize()
                            r["deterministic"] = bool(torch.equal(a, ids_o[0]) and torch.equal(b.view(torch.int32),
                                                                                               w_o[0].view(torch.int32)))
                        return r
                    crow[nm] = run_check(one)
                chk[name] = crow
                row = {"sets": nsets}
                time_impls(row, impls, nsets)
                out[name] = row
                dump()
                log("GATING %-40s %s | %s" % (name, fmt_row(row, [n for n, _ in impls]),
                                            " ".join("%s:%s" % (n, crow[n].get("verdict", "ERR" if "error" in crow[n]
                                                                               else "n/a")) for n, _ in impls)))
                for n, _ in impls:
                    if "error" in crow[n]:
                        log("   %s: %s" % (n, crow[n]["error"][:300]))
                logits = ids_o = w_o = tei = vws = None
                torch.cuda.empty_cache()


# ================================================================================================================
# align_ep: one rank of an expert-parallel layer (expert_map global -> local, -1 elsewhere)
# ================================================================================================================
EP_TOKENS = [1, 64, 1024, 4096, 16384]
EP_SHAPES = [(256, 32, 3, 8), (256, 64, 1, 8)]  # (E, local experts, rank, topk): rank r holds [r*L, (r+1)*L)


def make_map(E, L, rank):
    m = torch.full((E,), -1, dtype=torch.int32, device="cuda")
    m[rank * L:(rank + 1) * L] = torch.arange(L, dtype=torch.int32, device="cuda")
    return m


def torch_align_ep(ids, bs, emap, L):
    """Pure PyTorch, sync-free: map, then group by local id; dropped entries bucketed last (past num_tokens_post_pad)."""
    numel = ids.numel()
    dev = ids.device
    loc = emap[ids.reshape(-1).long()].long()
    flat = torch.where(loc >= 0, loc, torch.full_like(loc, L))
    counts = torch.zeros(L + 1, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + bs - 1) // bs * bs
    cum = torch.cumsum(padded, 0)
    starts = cum - padded
    sorted_e, order = torch.sort(flat, stable=True)
    cstart = torch.cumsum(counts, 0) - counts
    dest = starts[sorted_e] + torch.arange(numel, device=dev) - cstart[sorted_e]
    cap = numel + (L + 1) * (bs - 1)
    s = torch.full((cap,), numel, dtype=torch.int32, device=dev)
    s.scatter_(0, dest, order.to(torch.int32))
    nb = cdiv(cap, bs)
    bstart = torch.arange(nb, device=dev, dtype=torch.int64) * bs
    e = torch.searchsorted(cum[:L].contiguous(), bstart, right=True).to(torch.int32)
    e = torch.where(bstart < cum[L - 1], e, torch.full_like(e, -1))
    n = cum[L - 1:L].to(torch.int32)
    return s, e, n


def part_align_ep(R, quick):
    out = R.setdefault("align_ep", {})
    chk = R.setdefault("align_ep_check", {})
    g = torch.Generator(device="cuda")
    g.manual_seed(777)
    tokens = [64, 4096, 16384] if quick else EP_TOKENS
    shapes = EP_SHAPES[:1] if quick else EP_SHAPES
    bs = BS
    for (E, L, rank, k) in shapes:
        emap = make_map(E, L, rank)
        for T in tokens:
            if out_of_time(15):
                skip_note("align_ep", "E=%d L=%d T=%d" % (E, L, T))
                continue
            name = "%dx%d E=%d local=%d (rank %d)" % (T, k, E, L, rank)
            numel = T * k
            nsets = 8
            sets = [gen_ids(T, k, E, False, g) for _ in range(nsets)]
            cap, nb = proj_sizes(numel, L, bs)
            wsb = proj_ws_ep(numel, E, L, bs)
            po = [(torch.empty(cap, dtype=torch.int32, device="cuda"), torch.empty(nb, dtype=torch.int32, device="cuda"),
                   torch.empty(1, dtype=torch.int32, device="cuda"), torch.empty(numel, dtype=torch.int32, device="cuda"))
                  for _ in range(nsets)]
            pws = dev_ws(wsb)
            vcap = vllm_capacity(numel, E, bs)
            vo = [(torch.empty(vcap, dtype=torch.int32, device="cuda"),
                   torch.empty(cdiv(vcap, bs), dtype=torch.int32, device="cuda"),
                   torch.empty(1, dtype=torch.int32, device="cuda"), torch.empty(E + 1, dtype=torch.int32, device="cuda"))
                  for _ in range(nsets)]
            scap = numel + (L + 1) * (bs - 1)
            so = [(torch.empty(scap, dtype=torch.int32, device="cuda"),
                   torch.empty(cdiv(scap, bs), dtype=torch.int32, device="cuda"),
                   torch.empty(1, dtype=torch.int32, device="cuda"), torch.empty(L + 2, dtype=torch.int32, device="cuda"))
                  for _ in range(nsets)]
            sgl_fuse = scap <= 4096

            def f_proj(i, positions=False):
                s, e, n, p = po[i]
                proj_err(proj.moe_align_block_size_ep(sets[i].data_ptr(), MOE_DT[torch.int32], numel, E,
                                                      emap.data_ptr(), L, bs, s.data_ptr(), e.data_ptr(), n.data_ptr(),
                                                      None, p.data_ptr() if positions else None, pws.data_ptr(), wsb,
                                                      stream()))

            def f_vllm(i):
                s, e, n, cs = vo[i]
                peer_err(peers.vllm_moe_align_block_size_ep(sets[i].data_ptr(), 4, numel, k, E, bs, s.data_ptr(), vcap,
                                                            e.data_ptr(), n.data_ptr(), cs.data_ptr(), emap.data_ptr(),
                                                            stream()), "vllm align (expert_map)")

            def f_sgl(i):
                s, e, n, cs = so[i]
                loc = emap[sets[i].long()]  # the caller's map: local id or -1 (SGLang's +1 bucket takes the -1s)
                if not sgl_fuse:
                    s.fill_(numel)
                peer_err(peers.sgl_moe_align_block_size(loc.data_ptr(), 4, numel, L + 1, bs, s.data_ptr(), scap,
                                                        e.data_ptr(), n.data_ptr(), cs.data_ptr(), int(sgl_fuse),
                                                        stream()), "sglang align")

            tor = [None] * nsets

            def f_torch(i):
                tor[i] = torch_align_ep(sets[i], bs, emap, L)

            impls = [("project", f_proj), ("project+positions", lambda i: f_proj(i, True)), ("vllm", f_vllm),
                     ("sglang", f_sgl), ("torch", f_torch)]
            # ---- check (set 0)
            ids_np = sets[0].cpu().numpy().reshape(-1).astype(np.int64)
            map_np = emap.cpu().numpy().astype(np.int64)
            loc_np = map_np[ids_np]
            crow = {}

            def c_proj():
                s, e, n, p = po[0]
                s.fill_(-7); e.fill_(-7); n.fill_(-7); p.fill_(-7)
                f_proj(0, True)
                torch.cuda.synchronize()
                rs, re_, rn = ref_align(np.where(loc_np >= 0, loc_np, -1), L, bs, cap, nb)
                errs = []
                if int(n.item()) != rn:
                    errs.append("ntpp %d != %d" % (int(n.item()), rn))
                if not np.array_equal(s.cpu().numpy(), rs):
                    errs.append("sorted_token_ids differ from the stable reference")
                if not np.array_equal(e.cpu().numpy(), re_):
                    errs.append("expert_ids differ")
                pn = p.cpu().numpy()
                sn = s.cpu().numpy()
                want = np.full(numel, -1, np.int64)
                kept = np.nonzero(sn < numel)[0]
                want[sn[kept]] = kept
                if not np.array_equal(pn, want):
                    errs.append("token_positions wrong")
                return {"errors": errs, "ok": not errs}

            def c_peer(nm, fn, outs, dump_first):
                def c():
                    s, e, n = outs[0][0], outs[0][1], outs[0][2]
                    s.fill_(-7); e.fill_(-7); n.fill_(-7)
                    fn(0)
                    torch.cuda.synchronize()
                    errs = check_layout(loc_np, L, bs, s.cpu().numpy(), e.cpu().numpy(), int(n.item()), dump_first)
                    return {"errors": errs, "ok": not errs}
                return c

            def c_torch():
                f_torch(0)
                torch.cuda.synchronize()
                s, e, n = tor[0]
                errs = check_layout(loc_np, L, bs, s.cpu().numpy(), e.cpu().numpy(), int(n.item()), False)
                return {"errors": errs, "ok": not errs}

            crow["project"] = run_check(c_proj)
            crow["vllm"] = run_check(c_peer("vllm", f_vllm, vo, False))
            crow["sglang"] = run_check(c_peer("sglang", f_sgl, so, True))
            crow["torch"] = run_check(c_torch)
            chk[name] = crow
            row = {"local_slots": int((loc_np >= 0).sum()), "numel": numel}
            time_impls(row, impls, nsets)
            out[name] = row
            dump()
            log("ALIGN_EP %-34s %s | %s" % (name, fmt_row(row, [n for n, _ in impls]), " ".join(
                "%s:%s" % (n, "ok" if crow[n].get("ok") else ("n/a" if "unsupported" in crow[n] else "FAIL"))
                for n in crow)))
            for n in crow:
                for x in (crow[n].get("errors") or [])[:3]:
                    log("   %s: %s" % (n, x))
                if "error" in crow[n]:
                    log("   %s: %s" % (n, crow[n]["error"][:300]))
            sets = po = vo = so = tor = None
            torch.cuda.empty_cache()


# ================================================================================================================
# route: moe_route (gating + align_ep in one call) vs the peers' separate gating + align calls
# ================================================================================================================
ROUTE_CASES = [  # (name, kind, E, topk, L (None = no EP), rank)
    ("qwen3 softmax E=128 topk=8", "softmax", 128, 8, None, 0),
    ("dsv3 grouped E=256 topk=8", "dsv3", 256, 8, None, 0),
    ("dsv3 grouped E=256 topk=8 EP local=32", "dsv3", 256, 8, 32, 3),
]
ROUTE_TOKENS = [1, 64, 1024, 4096, 16384]


def part_route(R, quick):
    out = R.setdefault("route", {})
    chk = R.setdefault("route_check", {})
    g = torch.Generator(device="cuda")
    g.manual_seed(2468)
    tokens = [1, 1024, 16384] if quick else ROUTE_TOKENS
    dt = torch.bfloat16
    bs = BS
    for (cname, kind, E, k, L_, rank) in ROUTE_CASES:
        ep = L_ is not None
        L = L_ if ep else E
        emap = make_map(E, L, rank) if ep else None
        bias = (torch.randn(E, generator=g, device="cuda") * 0.05).to(torch.bfloat16).float() if kind == "dsv3" \
            else None
        if kind == "softmax":
            gate = gate_struct(k, 0, renorm=1, rsf=1.0)
        else:
            gate = gate_struct(k, 1, DSV3["groups"], DSV3["topk_group"], bias, 1, DSV3["rsf"])
        for T in tokens:
            if out_of_time(15):
                skip_note("route", "%s T=%d" % (cname, T))
                continue
            name = "%s T=%d bf16" % (cname, T)
            numel = T * k
            nsets = 8
            logits = [torch.randn(T, E, generator=g, device="cuda").to(dt) for _ in range(nsets)]
            ids_o = [torch.empty(T, k, dtype=torch.int32, device="cuda") for _ in range(nsets)]
            w_o = [torch.empty(T, k, dtype=torch.float32, device="cuda") for _ in range(nsets)]
            tei = torch.empty(T, k, dtype=torch.int32, device="cuda")
            cap, nb = proj_sizes(numel, L, bs)
            wsr = C.c_size_t(0)
            proj_err(proj.moe_route_workspace_size(T, E, C.byref(gate), L, bs, C.byref(wsr)))
            wsr = wsr.value
            rws = dev_ws(wsr)
            wse = proj_ws_ep(numel, E, L, bs)
            ews = dev_ws(wse)
            po = [(torch.empty(cap, dtype=torch.int32, device="cuda"), torch.empty(nb, dtype=torch.int32, device="cuda"),
                   torch.empty(1, dtype=torch.int32, device="cuda")) for _ in range(nsets)]
            vcap = vllm_capacity(numel, E, bs)
            vo = (torch.empty(vcap, dtype=torch.int32, device="cuda"),
                  torch.empty(cdiv(vcap, bs), dtype=torch.int32, device="cuda"),
                  torch.empty(1, dtype=torch.int32, device="cuda"), torch.empty(E + 1, dtype=torch.int32, device="cuda"))
            scap = numel + (L + 1) * (bs - 1)
            so = (torch.empty(scap, dtype=torch.int32, device="cuda"),
                  torch.empty(cdiv(scap, bs), dtype=torch.int32, device="cuda"),
                  torch.empty(1, dtype=torch.int32, device="cuda"), torch.empty(L + 2, dtype=torch.int32, device="cuda"))
            sgl_fuse = scap <= 4096
            mp = ptr(emap)

            def f_route(i):
                s, e, n = po[i]
                proj_err(proj.moe_route(logits[i].data_ptr(), MOE_DT[dt], T, E, C.byref(gate), mp, L, bs,
                                        ids_o[i].data_ptr(), w_o[i].data_ptr(), s.data_ptr(), e.data_ptr(),
                                        n.data_ptr(), None, rws.data_ptr(), wsr, stream()))

            def f_sep(i):
                s, e, n = po[i]
                proj_err(proj.moe_topk_gating(logits[i].data_ptr(), MOE_DT[dt], T, E, C.byref(gate),
                                              ids_o[i].data_ptr(), w_o[i].data_ptr(), stream()))
                proj_err(proj.moe_align_block_size_ep(ids_o[i].data_ptr(), MOE_DT[torch.int32], numel, E, mp, L, bs,
                                                      s.data_ptr(), e.data_ptr(), n.data_ptr(), None, None,
                                                      ews.data_ptr(), wse, stream()))

            def v_gate(i):
                if kind == "softmax":
                    peer_err(peers.vllm_topk_softmax(logits[i].data_ptr(), pdt(dt), T, E, k, w_o[i].data_ptr(),
                                                     ids_o[i].data_ptr(), tei.data_ptr(), None, 1, None, 0, 1.0,
                                                     stream()), "vllm topk_softmax")
                else:
                    peer_err(peers.vllm_grouped_topk(logits[i].data_ptr(), pdt(dt), T, E, DSV3["groups"],
                                                     DSV3["topk_group"], k, 1, DSV3["rsf"], bias.data_ptr(), 1,
                                                     w_o[i].data_ptr(), ids_o[i].data_ptr(), stream()),
                             "vllm grouped_topk")

            def f_vllm(i):
                v_gate(i)
                s, e, n, cs = vo
                peer_err(peers.vllm_moe_align_block_size_ep(ids_o[i].data_ptr(), 4, numel, k, E, bs, s.data_ptr(), vcap,
                                                            e.data_ptr(), n.data_ptr(), cs.data_ptr(), mp, stream()),
                         "vllm align")

            def f_sgl(i):
                x = logits[i].float()  # SGLang's caller casts the router logits to fp32
                peer_err(peers.sgl_moe_fused_gate(x.data_ptr(), bias.data_ptr(), 0, T, E,
                                                  DSV3["groups"], DSV3["topk_group"], k, 0, DSV3["rsf"], 1,
                                                  w_o[i].data_ptr(), ids_o[i].data_ptr(), stream()),
                         "sglang moe_fused_gate")
                s, e, n, cs = so
                src = emap[ids_o[i].long()] if ep else ids_o[i]
                if not sgl_fuse:
                    s.fill_(numel)
                peer_err(peers.sgl_moe_align_block_size(src.data_ptr(), 4, numel, L + 1, bs, s.data_ptr(), scap,
                                                        e.data_ptr(), n.data_ptr(), cs.data_ptr(), int(sgl_fuse),
                                                        stream()), "sglang align")

            def f_torch(i):
                lg = logits[i].float()
                if kind == "softmax":
                    p = torch.softmax(lg, -1)
                    v, ix = torch.topk(p, k, dim=-1)
                    w = v / v.sum(-1, keepdim=True)
                else:
                    s_ = lg.sigmoid()
                    b = s_ + bias
                    gs = b.view(T, DSV3["groups"], -1).topk(2, dim=-1)[0].sum(-1)
                    gi = gs.topk(DSV3["topk_group"], dim=-1)[1]
                    m = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gi, True)
                    m = m[:, :, None].expand(T, DSV3["groups"], E // DSV3["groups"]).reshape(T, E)
                    ix = b.masked_fill(~m, float("-inf")).topk(k, dim=-1)[1]
                    w = s_.gather(1, ix)
                    w = w / w.sum(-1, keepdim=True) * DSV3["rsf"]
                w_o[i].copy_(w)
                ids_o[i].copy_(ix)
                if ep:
                    torch_align_ep(ids_o[i], bs, emap, L)
                else:
                    torch_align(ids_o[i], bs, E)

            impls = [("project route", f_route), ("project gating+align_ep", f_sep), ("vllm", f_vllm),
                     ("sglang", f_sgl if kind == "dsv3" else "n/a: SGLang softmax top-k not built"),
                     ("torch", f_torch)]
            # ---- checks (set 0)
            crow = {}

            def c_route():
                f_route(0)
                torch.cuda.synchronize()
                a = [x.clone() for x in (ids_o[0], w_o[0], *po[0])]
                f_sep(0)
                torch.cuda.synchronize()
                b = [x.clone() for x in (ids_o[0], w_o[0], *po[0])]
                same = all(torch.equal(x.view(torch.int32), y.view(torch.int32)) for x, y in zip(a, b))
                ids_np = a[0].cpu().numpy().reshape(-1).astype(np.int64)
                loc_np = emap.cpu().numpy().astype(np.int64)[ids_np] if ep else ids_np
                rs, re_, rn = ref_align(np.where(loc_np >= 0, loc_np, -1), L, bs, cap, nb)
                exact = (int(a[4].item()) == rn and np.array_equal(a[2].cpu().numpy(), rs) and
                         np.array_equal(a[3].cpu().numpy(), re_))
                errs = [] if same else ["route != gating + align_ep"]
                if not exact:
                    errs.append("route's align outputs differ from the stable reference")
                return {"ok": not errs, "errors": errs}

            def c_peer(fn, outs, dump_first):
                def c():
                    fn(0)
                    torch.cuda.synchronize()
                    ids_np = ids_o[0].cpu().numpy().reshape(-1).astype(np.int64)
                    errs = []
                    if np.any((ids_np < 0) | (ids_np >= E)):
                        errs.append("ids out of range")
                        return {"ok": False, "errors": errs}
                    loc_np = emap.cpu().numpy().astype(np.int64)[ids_np] if ep else ids_np
                    errs += check_layout(loc_np, L, bs, outs[0].cpu().numpy(), outs[1].cpu().numpy(),
                                         int(outs[2].item()), dump_first)
                    return {"ok": not errs, "errors": errs}
                return c

            crow["project"] = run_check(c_route)
            crow["vllm"] = run_check(c_peer(f_vllm, vo, False))
            if kind == "dsv3":
                crow["sglang"] = run_check(c_peer(f_sgl, so, True))
            chk[name] = crow
            row = {"numel": numel}
            time_impls(row, impls, nsets)
            out[name] = row
            dump()
            log("ROUTE %-48s %s | %s" % (name, fmt_row(row, [n for n, _ in impls]), " ".join(
                "%s:%s" % (n, "ok" if crow[n].get("ok") else ("n/a" if "unsupported" in crow[n] else "FAIL"))
                for n in crow)))
            for n in crow:
                for x in (crow[n].get("errors") or [])[:3]:
                    log("   %s: %s" % (n, x))
                if "error" in crow[n]:
                    log("   %s: %s" % (n, crow[n]["error"][:300]))
            logits = ids_o = w_o = po = vo = so = None
            torch.cuda.empty_cache()


# ================================================================================================================
# datapath: moe_permute and moe_combine (FLAT, PERMUTED) vs vLLM permute/unpermute, torch, a copy of the bytes
# ================================================================================================================
DP_TOKENS = [1, 64, 1024, 4096, 16384]
DP_HIDDEN = [2048, 4096, 7168]
DP_EXPERTS = [64, 256]
DP_TOPK = 8


def part_datapath(R, quick):
    out = R.setdefault("datapath", {})
    chk = R.setdefault("datapath_check", {})
    g = torch.Generator(device="cuda")
    g.manual_seed(1357)
    dt = torch.bfloat16
    elt = 2
    k = DP_TOPK
    bs = BS
    tokens = [1, 1024, 16384] if quick else DP_TOKENS
    hiddens = [4096, 7168] if quick else DP_HIDDEN
    experts = [256] if quick else DP_EXPERTS
    for E in experts:
        for H in hiddens:
            for T in tokens:
                if out_of_time(25):
                    skip_note("datapath", "E=%d H=%d T=%d" % (E, H, T))
                    continue
                name = "T=%d H=%d E=%d topk=%d bf16" % (T, H, E, k)
                try:
                    _datapath_shape(out, chk, name, g, dt, elt, T, H, E, k, bs)
                except Exception as ex:  # noqa
                    out[name] = {"error": repr(ex)}
                    log("DATAPATH %s ERROR %r" % (name, ex))
                    log(traceback.format_exc()[-1500:])
                dump()
                torch.cuda.empty_cache()


def _datapath_shape(out, chk, name, g, dt, elt, T, H, E, k, bs):
    numel = T * k
    cap, nb = proj_sizes(numel, E, bs)
    set_bytes = (T * H + numel * H * 2 + cap * H) * elt
    nsets = n_sets(set_bytes, budget=8 << 30)
    hid = [torch.randn(T, H, generator=g, device="cuda").to(dt) for _ in range(nsets)]
    ids = [gen_ids(T, k, E, False, g) for _ in range(nsets)]
    wts = []
    for _ in range(nsets):
        w = torch.rand(T, k, generator=g, device="cuda") + 0.05
        wts.append((w / w.sum(-1, keepdim=True)).contiguous())
    # the project's align (identity map) with token_positions, once per set (inputs of permute / combine)
    wsb = proj_ws_ep(numel, E, E, bs)
    ws = dev_ws(wsb)
    al = []
    for i in range(nsets):
        s = torch.empty(cap, dtype=torch.int32, device="cuda")
        e = torch.empty(nb, dtype=torch.int32, device="cuda")
        n = torch.empty(1, dtype=torch.int32, device="cuda")
        p = torch.empty(numel, dtype=torch.int32, device="cuda")
        proj_err(proj.moe_align_block_size_ep(ids[i].data_ptr(), MOE_DT[torch.int32], numel, E, None, E, bs,
                                              s.data_ptr(), e.data_ptr(), n.data_ptr(), None, p.data_ptr(),
                                              ws.data_ptr(), wsb, stream()))
        al.append((s, e, n, p))
    torch.cuda.synchronize()
    # expert outputs in the flat layout [numel, H] and in the project's permuted layout [cap, H]
    flat_rows = [torch.randn(numel, H, generator=g, device="cuda").to(dt) for _ in range(nsets)]
    perm_rows = [torch.zeros(cap, H, dtype=dt, device="cuda") for _ in range(nsets)]
    for i in range(nsets):  # row p of the permuted layout = expert output of entry sorted[p] (so both layouts agree)
        s = al[i][0][:int(al[i][2].item())].long()
        keep = s < numel
        perm_rows[i][torch.nonzero(keep).squeeze(1)] = flat_rows[i][s[keep]]
    # vLLM permute state per set: permuted [numel, H], inv_permuted_idx, etc.
    vws_b = int(peers.vllm_moe_permute_sort_workspace_size(numel, E)) if not isinstance(
        peers.vllm_moe_permute_sort_workspace_size, _Missing) else 0
    vws_b = (vws_b + 15) // 16 * 16 + 16
    vws = dev_ws(vws_b)
    tei = torch.arange(numel, dtype=torch.int32, device="cuda")
    ve = [dict(perm=torch.empty(numel, H, dtype=dt, device="cuda"),
               efto=torch.empty(E + 1, dtype=torch.int64, device="cuda"),
               inv=torch.empty(numel, dtype=torch.int32, device="cuda"),
               pidx=torch.empty(numel, dtype=torch.int32, device="cuda"),
               pe=torch.empty(numel, dtype=torch.int32, device="cuda"),
               sri=torch.empty(numel, dtype=torch.int32, device="cuda"),
               tfs=torch.empty(numel, dtype=torch.int32, device="cuda")) for _ in range(2)]
    vperm_rows = None  # expert outputs in vLLM's layout, per set, for its unpermute (set in the check below)
    # outputs (shared by the sets)
    o_perm = torch.empty(cap, H, dtype=dt, device="cuda")
    o_comb = torch.empty(T, H, dtype=dt, device="cuda")
    ident = torch.arange(numel, dtype=torch.int32, device="cuda")
    # expert_first_token_offset for the identity (flat) case: only its last entry (= numel, every row valid) is read
    efto_full = torch.full((E + 1,), numel, dtype=torch.int64, device="cuda")

    def p_proj(i):
        s, e, n, p = al[i]
        proj_err(proj.moe_permute(hid[i].data_ptr(), MOE_DT[dt], T, H, k, s.data_ptr(), n.data_ptr(), cap,
                                  o_perm.data_ptr(), stream()))

    def p_proj_align(i):
        s, e, n, p = al[i]
        proj_err(proj.moe_align_block_size_ep(ids[i].data_ptr(), MOE_DT[torch.int32], numel, E, None, E, bs,
                                              s.data_ptr(), e.data_ptr(), n.data_ptr(), None, p.data_ptr(),
                                              ws.data_ptr(), wsb, stream()))
        p_proj(i)

    def p_vllm(i, st=None):
        v = st if st is not None else ve[i % 2]
        peer_err(peers.vllm_moe_permute(hid[i].data_ptr(), pdt(dt), T, H, ids[i].data_ptr(), tei.data_ptr(), None, E, E,
                                        k, v["perm"].data_ptr(), v["efto"].data_ptr(), v["inv"].data_ptr(),
                                        v["pidx"].data_ptr(), vws.data_ptr(), vws_b, v["pe"].data_ptr(),
                                        v["sri"].data_ptr(), v["tfs"].data_ptr(), stream()), "vllm moe_permute")

    def p_torch(i):
        s = al[i][0]
        torch.index_select(hid[i], 0, (s.clamp(max=numel - 1) // k).long(), out=o_perm)

    copy_src = [torch.empty(numel * H * elt, dtype=torch.uint8, device="cuda") for _ in range(min(nsets, 2))]
    copy_dst = torch.empty(numel * H * elt, dtype=torch.uint8, device="cuda")

    def p_copy(i):
        copy_dst.copy_(copy_src[i % len(copy_src)])

    def c_flat_proj(i):
        proj_err(proj.moe_combine(flat_rows[i].data_ptr(), MOE_DT[dt], 0, T, k, H, None, wts[i].data_ptr(), 1.0,
                                  o_comb.data_ptr(), stream()))

    def c_flat_vllm(i):
        peer_err(peers.vllm_moe_unpermute(flat_rows[i].data_ptr(), pdt(dt), wts[i].data_ptr(), ident.data_ptr(),
                                          efto_full.data_ptr(), E, T, H, k, o_comb.data_ptr(), stream()),
                 "vllm moe_unpermute")

    def c_torch_seq(rows_of_k, i):
        acc = None
        for kk in range(k):
            term = wts[i][:, kk:kk + 1] * rows_of_k(kk).float()
            acc = term if acc is None else acc + term
        o_comb.copy_(acc)

    def c_flat_torch(i):
        x = flat_rows[i].view(T, k, H)
        c_torch_seq(lambda kk: x[:, kk], i)

    def c_perm_proj(i):
        proj_err(proj.moe_combine(perm_rows[i].data_ptr(), MOE_DT[dt], 1, T, k, H, al[i][3].data_ptr(),
                                  wts[i].data_ptr(), 1.0, o_comb.data_ptr(), stream()))

    def c_perm_vllm(i):
        v = vstate[i]
        peer_err(peers.vllm_moe_unpermute(vperm_rows[i].data_ptr(), pdt(dt), wts[i].data_ptr(), v["inv"].data_ptr(),
                                          v["efto"].data_ptr(), E, T, H, k, o_comb.data_ptr(), stream()),
                 "vllm moe_unpermute")

    def c_perm_torch(i):
        g_ = perm_rows[i].index_select(0, al[i][3].long()).view(T, k, H)
        c_torch_seq(lambda kk: g_[:, kk], i)

    ccopy_src = [torch.empty((numel * H + T * H) * elt // 2, dtype=torch.uint8, device="cuda")
                 for _ in range(min(nsets, 2))]
    ccopy_dst = torch.empty((numel * H + T * H) * elt // 2, dtype=torch.uint8, device="cuda")

    def c_copy(i):
        ccopy_dst.copy_(ccopy_src[i % len(ccopy_src)])

    crow = {}
    # ---- permute checks (set 0)
    s0, e0, n0, p0 = al[0]
    ntpp0 = int(n0.item())
    sn = s0[:ntpp0].long()
    ref_perm = torch.zeros(ntpp0, H, dtype=dt, device="cuda")
    keep = sn < numel
    ref_perm[torch.nonzero(keep).squeeze(1)] = hid[0][sn[keep] // k]

    def ck_proj():
        o_perm.fill_(float("nan"))
        p_proj(0)
        torch.cuda.synchronize()
        ok = bool(torch.equal(o_perm[:ntpp0].view(torch.int16), ref_perm.view(torch.int16)))
        return {"ok": ok, "errors": [] if ok else ["permuted rows differ from hidden[sorted // topk] / zero rows"]}

    def ck_torch():
        p_torch(0)
        torch.cuda.synchronize()
        ok = bool(torch.equal(o_perm[:ntpp0][keep].view(torch.int16), ref_perm[keep].view(torch.int16)))
        return {"ok": ok, "errors": [] if ok else ["rows differ"], "note": "padding rows hold copies, not zeros"}

    vstate = []

    def ck_vllm():
        errs = []
        for i in range(nsets):  # its layout per set (input of its unpermute)
            ve[0]["perm"].fill_(float("nan"))
            p_vllm(i, ve[0])
            torch.cuda.synchronize()
            st = {kk: ve[0][kk].clone() for kk in ("efto", "inv", "pidx")}
            if i == 0:
                pid = ve[0]["pidx"].long()
                if not bool(((pid >= 0) & (pid < numel)).all()):
                    errs.append("permuted_idx out of range")
                else:
                    if not torch.equal(ve[0]["perm"].view(torch.int16), hid[0][pid // k].view(torch.int16)):
                        errs.append("permuted rows != hidden[permuted_idx // topk]")
                    ex = ids[0].reshape(-1).long()[pid]
                    if not bool((ex[1:] >= ex[:-1]).all()):
                        errs.append("rows not grouped by expert")
                    if not torch.equal(torch.sort(pid)[0], torch.arange(numel, device="cuda")):
                        errs.append("permuted_idx not a permutation")
                    inv = ve[0]["inv"].long()
                    if not torch.equal(pid[inv], torch.arange(numel, device="cuda")):
                        errs.append("inv_permuted_idx not the inverse")
            vstate.append(st)
        return {"ok": not errs, "errors": errs, "layout": "unpadded, rows = numel (no block padding)"}

    crow["permute project"] = run_check(ck_proj)
    crow["permute vllm"] = run_check(ck_vllm)
    crow["permute torch"] = run_check(ck_torch)
    if vstate and len(vstate) == nsets:  # expert outputs in vLLM's layout: the same values as the flat ones
        vperm_rows = [flat_rows[i][vstate[i]["pidx"].long()] for i in range(nsets)]

    # ---- combine checks: exact fp32-sequential reference (acc = acc + fl32(w*x), k ascending, one rounding)
    def combine_ref(i):
        x = flat_rows[i].view(T, k, H)
        acc = None
        for kk in range(k):
            term = wts[i][:, kk:kk + 1] * x[:, kk].float()
            acc = term if acc is None else acc + term
        r64 = None
        for kk in range(k):  # fp64, k at a time (no [T, k, H] fp64 temporary)
            t64 = wts[i][:, kk:kk + 1].double() * x[:, kk].double()
            r64 = t64 if r64 is None else r64 + t64
        return acc.to(dt), r64

    ref_c, ref64 = combine_ref(0)

    def ck_comb(fn):
        def c():
            o_comb.fill_(float("nan"))
            fn(0)
            torch.cuda.synchronize()
            bit = bool(torch.equal(o_comb.view(torch.int16), ref_c.view(torch.int16)))
            rel = float((o_comb.double() - ref64).norm() / ref64.norm())
            return {"ok": rel < 1e-2 and not bool(torch.isnan(o_comb).any()), "bit_exact_fp32_seq": bit,
                    "rel_err_vs_fp64": rel, "max_abs_vs_fp64": float((o_comb.double() - ref64).abs().max())}
        return c

    crow["combine flat project"] = run_check(ck_comb(c_flat_proj))
    crow["combine flat vllm"] = run_check(ck_comb(c_flat_vllm))
    crow["combine flat torch"] = run_check(ck_comb(c_flat_torch))
    crow["combine permuted project"] = run_check(ck_comb(c_perm_proj))
    if vperm_rows is not None:
        crow["combine permuted vllm"] = run_check(ck_comb(c_perm_vllm))
    crow["combine permuted torch"] = run_check(ck_comb(c_perm_torch))
    chk[name] = crow

    row = {"sets": nsets, "ntpp_set0": ntpp0, "capacity": cap,
           "permute_bytes": 2 * numel * H * elt, "combine_bytes": (numel * H + T * H) * elt}
    bm, nb_ = (8.0, 5) if T * H < (1 << 24) else (20.0, 5)
    perm = {}
    time_impls(perm, [("project", p_proj), ("project align_ep+permute", p_proj_align),
                      ("vllm (sort+permute)", p_vllm), ("torch index_select", p_torch),
                      ("copy of the bytes", p_copy)], nsets, batch_ms=bm, batches=nb_)
    flat = {}
    time_impls(flat, [("project", c_flat_proj), ("vllm unpermute (identity map)", c_flat_vllm),
                      ("torch", c_flat_torch), ("copy of the bytes", c_copy)], nsets, batch_ms=bm, batches=nb_)
    permc = {}
    time_impls(permc, [("project", c_perm_proj),
                       ("vllm unpermute", c_perm_vllm if vperm_rows is not None else "n/a: vLLM permute failed"),
                       ("torch gather", c_perm_torch), ("copy of the bytes", c_copy)], nsets, batch_ms=bm,
               batches=nb_)
    row["permute"], row["combine_flat"], row["combine_permuted"] = perm, flat, permc
    out[name] = row
    log("DATAPATH %-34s permute: %s" % (name, fmt_row(perm, list(perm))))
    log("         %-34s combine flat: %s" % ("", fmt_row(flat, list(flat))))
    log("         %-34s combine permuted: %s" % ("", fmt_row(permc, list(permc))))
    bad = ["%s: %s" % (kk, v.get("errors") or v.get("error")) for kk, v in crow.items()
           if not v.get("ok", False) and "unsupported" not in v]
    log("         checks: " + ("all ok" if not bad else "; ".join(bad)[:600]))


# ================================================================================================================
ALL_PARTS = ["floors", "align", "sum", "gating", "datapath", "align_ep", "route", "client"]
DEFAULT_PARTS = ["floors", "align", "sum", "gating", "datapath", "align_ep", "route"]


def main():
    global ALIGN_SHAPES, SUM_SHAPES, SUM_DTYPES
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts_pos", nargs="*", metavar="PART", help="parts to run: " + " ".join(ALL_PARTS))
    ap.add_argument("--parts", default=None, help="comma-separated parts (older form)")
    ap.add_argument("--quick", action="store_true", help="trimmed shapes (about a third of the time)")
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(HERE, "out")))
    ap.add_argument("--passes", type=int, default=None, help="align timing passes (default 2, --quick 1)")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("BENCH_BUDGET", "0") or 0),
                    help="seconds: no new shape starts past this (0 = no limit)")
    ap.add_argument("--json", default="results.json")
    a = ap.parse_args()
    parts = []
    for p in (a.parts_pos or (a.parts.split(",") if a.parts else DEFAULT_PARTS)):
        parts += [x for x in p.split(",") if x]
    bad = [p for p in parts if p not in ALL_PARTS]
    if bad:
        log("unknown part(s): %s; known: %s" % (", ".join(bad), " ".join(ALL_PARTS)))
        sys.exit(2)
    if a.budget and a.budget > 0:
        DEADLINE[0] = T0 + a.budget
    passes = a.passes or (1 if a.quick else 2)
    if a.quick:
        ALIGN_SHAPES = [(1, 8, 256, False), (1024, 8, 256, False), (16384, 8, 256, False), (65536, 8, 256, True),
                        (4096, 8, 1024, False)]
        SUM_SHAPES = [(1, 8, 4096), (4096, 8, 4096), (4096, 8, 7168)]
        SUM_DTYPES = [torch.bfloat16]
    if not torch.cuda.is_available():
        log("FATAL: torch sees no CUDA device")
        sys.exit(4)
    os.makedirs(a.out, exist_ok=True)
    R = {"args": {"parts": parts, "quick": a.quick, "passes": passes, "budget": a.budget},
         "missing_symbols": MISSING, "part_status": {}, "skipped": SKIPPED}
    path = os.path.join(a.out, a.json)

    def _dump():
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(R, f, indent=1, default=str)
        os.replace(tmp, path)
    _DUMP[0] = _dump

    def run_part(p, fn):
        t = time.time()
        log("==== part %s (%.0f s elapsed)" % (p, time.time() - T0))
        try:
            fn()
            R["part_status"][p] = "ok (%.1f s)" % (time.time() - t)
        except Exception as ex:  # noqa
            R["part_status"][p] = "error: %r" % (ex,)
            log("PART %s FAILED: %r" % (p, ex))
            log(traceback.format_exc()[-3000:])
            try:
                torch.cuda.synchronize()
            except Exception as ex2:  # noqa
                log("CUDA context broken after part %s: %r" % (p, ex2))
        dump()

    run_part("env", lambda: part_env(R))
    table = {
        "align": lambda: (part_align_check(R), dump(), part_align_time(R, passes)),
        "sum": lambda: part_sum(R),
        "client": lambda: part_client(R),
        "gating": lambda: part_gating(R, a.quick),
        "datapath": lambda: part_datapath(R, a.quick),
        "align_ep": lambda: part_align_ep(R, a.quick),
        "route": lambda: part_route(R, a.quick),
    }
    if "floors" in parts:
        run_part("floors_start", lambda: part_floors(R, "start"))
    for p in parts:
        if p == "floors":
            continue
        run_part(p, table[p])
    if "floors" in parts:
        run_part("floors_end", lambda: part_floors(R, "end"))
    dump()
    failed = [p for p, s in R["part_status"].items() if not s.startswith("ok")]
    log("PART STATUS: " + "; ".join("%s %s" % kv for kv in R["part_status"].items()))
    if SKIPPED:
        log("SKIPPED (time budget): %d shapes" % len(SKIPPED))
    log("DONE in %.0f s%s" % (time.time() - T0, "" if not failed else " (failed parts: %s)" % ", ".join(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
