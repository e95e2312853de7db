#!/usr/bin/env python3
"""Many experts (1025 .. 65536, LoRA-style "virtual experts"): the project's moe_align_block_size against the peers'
paths for large expert counts, each timed as a CUDA-graph replay exactly like bench.py's align benchmark.

  python3 bench_many.py [--out DIR] [--json many.json] [--tokens 1,16,256,4096,65536] [--topk 8]
                        [--experts 1025,4096,16384,65536] [--dists lora,uniform] [--lora-experts auto]
                        [--block 64] [--passes 1] [--draws 2] [--no-floors]

Implementations (README-many.md says how each is mapped and which shapes each takes):
  project         libmoe_routing.so moe_align_block_size, num_experts = Ev (the virtual expert count)
  sglang          SGLang jit moe_align_block_size (v2 kernel above 1024 experts), num_experts = Ev + 1 <= 8192
  vllm            vLLM moe_align_block_size (padded_num_experts < 1024: recorded n/a for every shape here)
  vllm_lora_tok   vLLM moe_lora_align_block_size, Ev = max_loras x Ep; token t -> adapter token_lora_mapping[t],
                  topk_ids = local expert ids; needs every token's k ids inside one adapter (the "lora" draw)
  vllm_lora_slot  the same op on [numel, 1] ids: every (token, k) slot is its own "token", so any draw maps
  torch           pure PyTorch (sync-free, graph-capturable), as in bench.py

Draws: "uniform" = ids uniform in [0, Ev); "lora" = token t gets an adapter a_t uniform in [0, L), its k ids uniform
in a_t's range [a_t * Ep, (a_t + 1) * Ep) (the layout of LoRA virtual experts, v = adapter * Ep + local expert).

Checks before timing: every output is poisoned (-7) first; project bit-equal to the stable reference (by expert, then
flat index); peers: every flat index once in its expert's padded segment, padding = sentinel numel, expert_ids right
(vLLM LoRA: each active adapter's buffers are concatenated in adapter order, which is the virtual-expert order, and
checked as one align; their tails must hold the sentinel / -1). Each draw runs twice and is byte-compared.
"""
import argparse
import ctypes as C
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench as B  # noqa: E402  (loads bin/libmoe_routing.so and bin/libpeers.so, sets their argtypes)

log = B.log
cdiv = B.cdiv
Unsupported = B.Unsupported
peers = B.peers

peers.vllm_moe_lora_align_block_size.argtypes = [
    C.c_void_p, C.c_int, C.c_int64, C.c_int64,  # topk_ids, id_bytes, num_tokens (= size(0)), topk (= size(1))
    C.c_void_p, C.c_int64, C.c_int64, C.c_int64,  # token_lora_mapping, num_experts (per adapter), block, max_loras
    C.c_int64, C.c_int64,  # max_num_tokens_padded, max_num_m_blocks
    C.c_void_p, C.c_void_p, C.c_void_p,  # sorted_token_ids, expert_ids, num_tokens_post_pad
    C.c_void_p, C.c_void_p,  # adapter_enabled, lora_ids
    C.c_void_p, C.c_void_p, C.c_void_p]  # token_mask, cumsum, stream
peers.vllm_moe_lora_align_block_size.restype = C.c_int

VLLM_MAX_EP = 992  # padded_num_experts = ceil32(E) must be < 1024


def auto_split(Ev):
    """Largest per-adapter expert count Ep <= 992 that divides Ev: Ev = L x Ep."""
    for d in range(min(VLLM_MAX_EP, Ev), 0, -1):
        if Ev % d == 0:
            return d
    return 1


def splits_for(Ev, spec):
    out = []
    for s in spec:
        Ep = auto_split(Ev) if s == "auto" else int(s)
        if Ep <= VLLM_MAX_EP and Ev % Ep == 0 and Ep not in out:
            out.append(Ep)
    return out


# ----------------------------------------------------------------------------------------------------------------
# input sets
# ----------------------------------------------------------------------------------------------------------------
class InputSet:
    """ids [T, k] int32 virtual ids, plus per-split LoRA metadata prepared once (as vLLM's update_metadata does once
    per step, outside the align call)."""

    def __init__(self, ids):
        self.ids = ids
        self._meta = {}

    def lora_meta(self, Ep, mode):
        key = (Ep, mode)
        if key in self._meta:
            return self._meta[key]
        ids = self.ids
        T, k = ids.shape
        adapter = torch.div(ids, Ep, rounding_mode="floor")
        local = (ids - adapter * Ep).to(torch.int32)
        if mode == "tok":
            if T and not bool((adapter.min(1).values == adapter.max(1).values).all()):
                m = None  # some token's ids span several adapters
            else:
                mapping = adapter[:, 0].to(torch.int32).contiguous() if T else adapter.new_empty(0)
                m = (local.contiguous(), mapping)
        else:  # slot: every (token, k) slot its own row of a [numel, 1] problem
            m = (local.reshape(-1, 1).contiguous(), adapter.reshape(-1).to(torch.int32).contiguous())
        if m is not None:
            lids = torch.unique(m[1], sorted=True).to(torch.int32)
            m = m + (lids,)
        self._meta[key] = m
        return m


def gen_set(T, k, Ev, dist, Ep, g):
    if dist == "uniform":
        ids = torch.randint(0, Ev, (T, k), generator=g, device="cuda", dtype=torch.int32)
    else:
        L = Ev // Ep
        a = torch.randint(0, L, (T, 1), generator=g, device="cuda", dtype=torch.int32)
        loc = torch.randint(0, Ep, (T, k), generator=g, device="cuda", dtype=torch.int32)
        ids = (a * Ep + loc).contiguous()
    return InputSet(ids)


# ----------------------------------------------------------------------------------------------------------------
# vLLM LoRA align: caller = vllm/lora/punica_wrapper/punica_gpu.py PunicaWrapperGPU.moe_lora_align_block_size
# (pad_sorted_ids False): mntp = numel + E * (bs - 1); outputs torch.empty; token_lora_mapping and lora_ids from
# LoRAKernelMeta (lora_ids = active_lora_ids: sorted unique adapters, then -1, length max_loras + 1);
# adapter_enabled ones(max_loras + 1). The op's own temporaries (token_mask new_empty, cumsum new_zeros) are
# allocated here per call and zeroed inside the export.
# ----------------------------------------------------------------------------------------------------------------
def vllm_lora_call(local, mapping, lids_active, Ep, L, bs, poison=False):
    N, kk = local.shape
    numel = N * kk
    mntp = numel + Ep * (bs - 1)
    nb = cdiv(mntp, bs)
    dev = local.device
    s = torch.empty(L * mntp, dtype=torch.int32, device=dev)
    e = torch.empty(L * nb, dtype=torch.int32, device=dev)
    n = torch.empty(L, dtype=torch.int32, device=dev)
    if poison:
        s.fill_(-7); e.fill_(-7); n.fill_(-7)
    token_mask = torch.empty(max(L * N, 1), dtype=torch.int32, device=dev)
    cumsum = torch.empty(L * (Ep + 1), dtype=torch.int32, device=dev)
    rc = peers.vllm_moe_lora_align_block_size(
        local.data_ptr(), local.element_size(), N, kk, mapping.data_ptr(), Ep, bs, L, mntp, nb,
        s.data_ptr(), e.data_ptr(), n.data_ptr(), _adapter_enabled(L, dev).data_ptr(), lids_active.data_ptr(),
        token_mask.data_ptr(), cumsum.data_ptr(), B.stream())
    if rc == -1000:
        raise Unsupported("vLLM LoRA: padded_num_experts (per adapter) must be less than 1024")
    if rc != 0:
        raise RuntimeError("vllm lora rc %d" % rc)
    return s, e, n, (mntp, nb)


_AE = {}


def _adapter_enabled(L, dev):
    if L not in _AE:
        _AE[L] = torch.ones(L + 1, dtype=torch.int32, device=dev)
    return _AE[L]


def _lora_ids_padded(lids, L):
    """active_lora_ids of LoRAKernelMeta: length max_loras + 1, filled with -1, sorted unique ids first."""
    out = torch.full((L + 1,), -1, dtype=torch.int32, device=lids.device)
    out[: lids.numel()] = lids
    return out


def make_lora_impl(mode, Ep):
    def fn(iset, bs, Ev, poison=False):
        L = Ev // Ep
        m = iset.lora_meta(Ep, mode)
        if m is None:
            raise Unsupported("vLLM LoRA (token mapping): a token's k ids span several adapters; "
                              "token_lora_mapping is per token")
        local, mapping, lids = m
        key = ("lids_padded", Ep, mode)
        if key not in iset._meta:
            iset._meta[key] = _lora_ids_padded(lids, L)
        return vllm_lora_call(local, mapping, iset._meta[key], Ep, L, bs, poison) + (lids, L)
    return fn


def flat_impl(f):
    def fn(iset, bs, Ev, poison=False):
        return f(iset.ids, bs, Ev, poison)
    return fn


# ----------------------------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------------------------
def lora_to_flat(out, Ep, bs, numel):
    """Concatenate the active adapters' segments (adapter order = virtual expert order) into one flat align output.
    Returns (s_cat, e_cat, total, tail_errors) as numpy."""
    s, e, n, (mntp, nb), lids, L = out
    s2 = s.view(L, mntp)
    e2 = e.view(L, nb)
    n_h = n.cpu().numpy()
    errs = []
    segs, esegs, total = [], [], 0
    for a in lids.cpu().numpy().tolist():
        na = int(n_h[a])
        if na < 0 or na > mntp or na % bs:
            errs.append("adapter %d: num_tokens_post_pad %d out of range" % (a, na))
            continue
        segs.append(s2[a, :na])
        esegs.append(e2[a, : na // bs].to(torch.int64) + a * Ep)
        if na < mntp and bool((s2[a, na:] != numel).any()):
            errs.append("adapter %d: sorted tail not all sentinel" % a)
        if na // bs < nb and bool((e2[a, na // bs:] != -1).any()):
            errs.append("adapter %d: expert_ids tail not all -1" % a)
        total += na
    s_cat = torch.cat(segs).cpu().numpy() if segs else np.zeros(0, np.int32)
    e_cat = torch.cat(esegs).cpu().numpy() if esegs else np.zeros(0, np.int64)
    return s_cat, e_cat, total, errs


def outputs_equal(a, b):
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or not torch.equal(x, y):
                return False
    return True


def check_one(impl, fn, iset, Ev, bs):
    """Runs fn twice (poisoned), checks the first run, returns (errors, deterministic, out_ints)."""
    ids_np = iset.ids.cpu().numpy().reshape(-1).astype(np.int64)
    numel = ids_np.size
    o1 = fn(iset, bs, Ev, poison=True)
    o2 = fn(iset, bs, Ev, poison=True)
    torch.cuda.synchronize()
    det = outputs_equal(o1, o2)
    errs = []
    if impl.startswith("vllm_lora"):
        Ep = Ev // o1[5]
        s_cat, e_cat, total, errs = lora_to_flat(o1, Ep, bs, numel)
        errs += B.check_invariants(ids_np, Ev, bs, s_cat, e_cat, total)
        out_ints = int(o1[0].numel() + o1[1].numel())
    else:
        s, e, n = o1
        s_np, e_np, n_v = s.cpu().numpy(), e.cpu().numpy(), int(n.cpu().item())
        out_ints = int(s_np.size + e_np.size)
        if impl == "project":
            rs, re_, rn = B.ref_align(ids_np, Ev, bs, s_np.size, e_np.size)
            if n_v != rn:
                errs.append("ntpp %d != %d" % (n_v, rn))
            if not np.array_equal(s_np, rs):
                bad = np.nonzero(s_np != rs)[0]
                errs.append("sorted_token_ids differ at %d positions (first %d)" % (bad.size, bad[0]))
            if not np.array_equal(e_np, re_):
                bad = np.nonzero(e_np != re_)[0]
                errs.append("expert_ids differ at %d positions (first %d)" % (bad.size, bad[0]))
        else:
            errs = B.check_invariants(ids_np, Ev, bs, s_np, e_np, n_v)
    return errs, det, out_ints


# ----------------------------------------------------------------------------------------------------------------
# main loop
# ----------------------------------------------------------------------------------------------------------------
def impls_for(Ev, spec):
    L = [("project", flat_impl(B.proj_align)), ("sglang", flat_impl(B.sgl_align)),
         ("vllm", flat_impl(B.vllm_align))]
    sp = splits_for(Ev, spec)
    for j, Ep in enumerate(sp):
        suf = "" if j == 0 else "@E%d" % Ep
        L.append(("vllm_lora_tok" + suf, make_lora_impl("tok", Ep)))
        L.append(("vllm_lora_slot" + suf, make_lora_impl("slot", Ep)))
    L.append(("torch", flat_impl(B.torch_align)))
    return L, sp


def run(R, a):
    bs = a.block
    g = torch.Generator(device="cuda")
    checks = R.setdefault("many_check", {})
    times = R.setdefault("many_time", {})
    meta = R.setdefault("many_meta", {})
    spec = a.lora_experts.split(",")
    for Ev in [int(x) for x in a.experts.split(",")]:
        for T in [int(x) for x in a.tokens.split(",")]:
            for dist in a.dists.split(","):
                k = a.topk
                name = "%dx%d/%d %s" % (T, k, Ev, dist)
                impls, sp = impls_for(Ev, spec)
                Ep0 = sp[0] if sp else auto_split(Ev)
                meta[name] = {"T": T, "k": k, "E": Ev, "dist": dist, "numel": T * k, "block": bs,
                              "lora_splits": {("vllm_lora_tok" + ("" if j == 0 else "@E%d" % Ep)): {
                                  "max_loras": Ev // Ep, "experts_per_adapter": Ep} for j, Ep in enumerate(sp)},
                              "lora_draw_adapters": (Ev // Ep0) if dist == "lora" else None,
                              "lora_draw_experts_per_adapter": Ep0 if dist == "lora" else None,
                              "out_ints": {}}
                # ---- checks
                g.manual_seed(1234 + T + Ev)
                res = {}
                for impl, fn in impls:
                    r = {"draws": 0, "errors": [], "deterministic": None, "unsupported": None}
                    try:
                        det_all = True
                        for d in range(a.draws):
                            iset = gen_set(T, k, Ev, dist, Ep0, g)
                            errs, det, oi = check_one(impl, fn, iset, Ev, bs)
                            r["errors"] += ["draw %d: %s" % (d, x) for x in errs]
                            det_all = det_all and det
                            meta[name]["out_ints"][impl] = oi
                            r["draws"] += 1
                            del iset
                        r["deterministic"] = det_all
                    except Unsupported as ex:
                        r["unsupported"] = str(ex)
                    except Exception as ex:  # noqa
                        r["errors"].append("exception: %r" % (ex,))
                        torch.cuda.synchronize()
                    res[impl] = r
                checks[name] = res
                B.dump()
                log("CHECK %-22s " % name + "  ".join(
                    "%s:%s%s" % (i, "n/a" if res[i]["unsupported"] else ("ok" if not res[i]["errors"] else "FAIL"),
                                 "" if res[i]["unsupported"] else ("/det" if res[i]["deterministic"] else "/nondet"))
                    for i, _ in impls))
                for i, _ in impls:
                    for x in res[i]["errors"][:3]:
                        log("   %s: %s" % (i, x))
                # ---- timing
                row = times.setdefault(name, {})
                for p in range(a.passes):
                    g.manual_seed(100 + p + T + Ev)
                    sets = [gen_set(T, k, Ev, dist, Ep0, g) for _ in range(8)]
                    for impl, fn in impls:
                        if res[impl]["unsupported"]:
                            row[impl] = "n/a: " + res[impl]["unsupported"]
                            continue
                        if isinstance(row.get(impl), str):
                            continue
                        try:
                            for s_ in sets:  # metadata prepared outside the graph (once per step in vLLM)
                                fn(s_, bs, Ev)
                            torch.cuda.synchronize()
                            calls = [(lambda i=i, fn=fn, ss=sets: fn(ss[i % 8], bs, Ev)) for i in range(16)]
                            us, vals = B.time_graph(calls)
                            row.setdefault(impl, []).append({"us": us, "batches": vals})
                        except Unsupported as ex:
                            row[impl] = "n/a: " + str(ex)
                        except Exception as ex:  # noqa
                            row[impl] = "error: %r" % (ex,)
                            torch.cuda.synchronize()
                    del sets
                    torch.cuda.empty_cache()
                    B.dump()
                    log("TIME pass %d %-22s " % (p, name) + "  ".join(
                        "%s %s" % (i, ("%.2f" % row[i][-1]["us"]) if isinstance(row.get(i), list)
                                   else str(row.get(i))[:12]) for i, _ in impls))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(HERE, "out")))
    ap.add_argument("--json", default="many.json")
    ap.add_argument("--tokens", default="1,16,256,4096,65536")
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--experts", default="1025,4096,16384,65536")
    ap.add_argument("--dists", default="lora,uniform")
    ap.add_argument("--lora-experts", default="auto",
                    help="experts per LoRA adapter for the vLLM LoRA mapping: 'auto' (largest divisor of E that is "
                         "<= 992) and/or numbers, comma-separated; the first one also shapes the 'lora' draw")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--no-floors", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    R = {}
    path = os.path.join(a.out, a.json)

    def _dump():
        with open(path, "w") as f:
            json.dump(R, f, indent=1)
    B._DUMP[0] = _dump
    B.part_env(R)
    R["many_config"] = vars(a)
    B.dump()
    if not a.no_floors:
        B.part_floors(R, "start")
        B.dump()
    t0 = time.time()
    run(R, a)
    R["many_seconds"] = time.time() - t0
    B.dump()
    log("DONE many (%.0f s)" % R["many_seconds"])


if __name__ == "__main__":
    main()
