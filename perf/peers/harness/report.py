#!/usr/bin/env python3
"""Markdown tables from results.json (bench.py):  python3 report.py results.json > tables.md"""
import json
import sys

R = json.load(open(sys.argv[1]))
P = print
IMPLS = ["project", "vllm", "sglang", "torch"]
PEERS = ["vllm", "sglang", "torch"]
KERNEL_PEERS = ["vllm", "sglang"]


def us_of(cell):
    if isinstance(cell, list):
        v = [c["us"] for c in cell]
        return sum(v) / len(v), v
    return None, cell


def f(x):
    if x is None:
        return "-"
    if x >= 100:
        return "%.0f" % x
    if x >= 10:
        return "%.1f" % x
    return "%.2f" % x


e = R.get("env", {})
P("Device: %s, %s SMs, L2 %s B, torch %s (CUDA %s), triton %s, %s" % (
    e.get("device"), e.get("sms"), e.get("l2_bytes"), e.get("torch"), e.get("cuda"), e.get("triton"), e.get("time")))
P()
P("| floor | start | end |")
P("|---|---:|---:|")
fl = R.get("floors", {})
for key, lab in [("empty_node_us", "empty kernel, graph node, 16-node graph (us)"), ("empty_node100_us", "empty kernel, graph node, 100-node graph (us)"), ("copy_1GiB_GBps", "1 GiB D2D copy, read+write (GB/s)")]:
    P("| %s | %s | %s |" % (lab, f(fl.get("start", {}).get(key)), f(fl.get("end", {}).get(key))))
P()

if "align_time" in R:
    P("### align_block_size, graph replay, us per call (block 64, int32 ids; mean of the passes' medians)")
    P()
    P("| shape (T x k / E) | project | vLLM | SGLang | pure PyTorch | best peer kernel | best kernel / project | best incl. PyTorch / project |")
    P("|---|---:|---:|---:|---:|---|---:|---:|")
    for name, row in R["align_time"].items():
        vals = {i: us_of(row.get(i))[0] for i in IMPLS}
        cells = []
        for i in IMPLS:
            v, raw = us_of(row.get(i))
            cells.append(f(v) if v is not None else ("n/a" if isinstance(raw, str) and raw.startswith("n/a") else "err"))
        kp = [(vals[i], i) for i in KERNEL_PEERS if vals[i] is not None]
        ap = [(vals[i], i) for i in PEERS if vals[i] is not None]
        bk = min(kp) if kp else (None, "-")
        ba = min(ap) if ap else (None, "-")
        pr = vals["project"]
        P("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, *cells, bk[1], ("%.2f" % (bk[0] / pr)) if (bk[0] and pr) else "-",
            ("%.2f (%s)" % (ba[0] / pr, ba[1])) if (ba[0] and pr) else "-"))
    P()
    P("Per-pass medians (us): " + "; ".join(
        "%s: %s" % (name, ", ".join("%s %s" % (i, "/".join(f(x) for x in us_of(row.get(i))[1]) if isinstance(row.get(i), list) else "n/a") for i in IMPLS))
        for name, row in R["align_time"].items()))
    P()

if "align_check" in R:
    P("### align correctness (3 fresh draws per shape, outputs poisoned with -7 first) and determinism (each draw run twice, byte-compared)")
    P()
    P("| shape | project (bit-exact vs stable reference) | vLLM (invariants) | SGLang (invariants) | pure PyTorch (invariants) |")
    P("|---|---|---|---|---|")
    for name, row in R["align_check"].items():
        cells = []
        for i in IMPLS:
            r = row[i]
            if r.get("unsupported"):
                cells.append("n/a")
                continue
            s = "ok" if not r["errors"] else "FAIL (%s)" % "; ".join(r["errors"][:2])
            s += ", det" if r["deterministic"] else ", NON-det"
            cells.append(s)
        P("| %s | %s |" % (name, " | ".join(cells)))
    P()

if "sum" in R:
    P("### moe_sum, graph replay, us per call (GB/s = input read + output written)")
    P()
    P("| shape dtype | MB | project us (GB/s) | vLLM | SGLang | torch.sum | copy of same bytes us (GB/s) | project / copy | best peer | best peer / project | bit-exact (p/v/s/t) |")
    P("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for name, row in R["sum"].items():
        c = row["copy"]
        cells = ["%s (%.0f)" % (f(row[i]["us"]), row[i]["GBps"]) for i in IMPLS]
        best = min((row[i]["us"], i) for i in PEERS)
        P("| %s | %.1f | %s | %s (%.0f) | %.2f | %s | %.2f | %s |" % (
            name, row["bytes"] / 1e6, " | ".join(cells), f(c["us"]), c["GBps"], row["project"]["us"] / c["us"],
            best[1], best[0] / row["project"]["us"],
            "/".join("y" if row[i]["bit_exact_fp32_seq"] else "n" for i in IMPLS)))
    P()
    P("Relative error vs fp64 sum: " + "; ".join("%s: %s" % (n, ", ".join("%s %.1e" % (i, r[i]["rel_err_vs_fp64"]) for i in IMPLS)) for n, r in R["sum"].items()))
    P()

if "client" in R:
    P("### real client: vLLM Triton fused_moe_kernel fed by the project's align (bf16, hidden 1024, intermediate 512)")
    P()
    P("| case | BLOCK_SIZE_M | project: rel err / max abs | vLLM align: rel err | project vs vLLM-fed output | EP (upper half of experts = -1): rel err / max abs |")
    P("|---|---:|---|---|---|---|")
    for name, r in R["client"].items():
        if "error" in r:
            P("| %s | - | ERROR %s | | | |" % (name, r["error"]))
            continue
        P("| %s | %d | %.2e / %.2e | %.2e | %s | %.2e / %.2e |" % (
            name, r["block_size_m"], r["project"]["rel_norm"], r["project"]["max_abs"], r["vllm_align"]["rel_norm"],
            "bit-identical" if r["project_vs_vllm_bit_identical"] else "max diff %.2e" % r["project_vs_vllm_max_abs"],
            r["ep_project"]["rel_norm"], r["ep_project"]["max_abs"]))
    P()


# ---------------------------------------------------------------------------------------------------------------
# parts added with the gating / datapath / align_ep / route benches
# ---------------------------------------------------------------------------------------------------------------
def cell_us(v):
    if isinstance(v, dict) and "us" in v:
        return v["us"]
    return None


def cell_txt(v):
    u = cell_us(v)
    if u is not None:
        return f(u)
    if v is None:
        return "-"
    s = str(v)
    return "n/a" if s.startswith("n/a") else ("err" if s.startswith("error") else s[:20])


def generic_table(title, rows, impls, base="project", peers=None, extra=None):
    peers = peers if peers is not None else [i for i in impls if i != base and not i.startswith("project")
                                             and not i.startswith("copy")]
    P("### " + title)
    P()
    hdr = "| shape | " + " | ".join(impls) + " | best peer | best peer / %s |" % base
    P(hdr)
    P("|---|" + "---:|" * len(impls) + "---|---:|")
    for name, row in rows.items():
        if not isinstance(row, dict):
            P("| %s | %s |" % (name, str(row)[:80]))
            continue
        if "error" in row and len(row) == 1:
            P("| %s | ERROR %s |" % (name, str(row["error"])[:100]))
            continue
        cells = [cell_txt(row.get(i)) for i in impls]
        pv = [(cell_us(row.get(i)), i) for i in peers if cell_us(row.get(i)) is not None]
        b = min(pv) if pv else (None, "-")
        pr = cell_us(row.get(base))
        P("| %s | %s | %s | %s |" % (name, " | ".join(cells), b[1], ("%.2f" % (b[0] / pr)) if (b[0] and pr) else "-"))
    P()
    errs = ["%s / %s: %s" % (name, i, row[i]) for name, row in rows.items() if isinstance(row, dict)
            for i in impls if isinstance(row.get(i), str) and row[i].startswith("error")]
    if errs:
        P("Errors while timing: " + "; ".join(e[:200] for e in errs[:12]))
        P()


def check_summary(title, chk, fmt):
    if not chk:
        return
    P("#### " + title)
    P()
    impls = []
    for row in chk.values():
        for i in row:
            if i not in impls:
                impls.append(i)
    P("| shape | " + " | ".join(impls) + " |")
    P("|---|" + "---|" * len(impls))
    for name, row in chk.items():
        P("| %s | %s |" % (name, " | ".join(fmt(row.get(i)) for i in impls)))
    P()


def fmt_ok(r):
    if r is None:
        return "-"
    if "unsupported" in r:
        return "n/a"
    if "error" in r:
        return "ERROR " + str(r["error"])[:60]
    s = "ok" if r.get("ok") else "FAIL " + "; ".join(r.get("errors") or [])[:80]
    if "bit_exact_fp32_seq" in r:
        s += ", %s, rel %.1e" % ("bit-exact" if r["bit_exact_fp32_seq"] else "not bit-exact", r["rel_err_vs_fp64"])
    return s


def fmt_gate(r):
    if r is None:
        return "-"
    if "unsupported" in r:
        return "n/a"
    if "error" in r:
        return "ERROR " + str(r["error"])[:60]
    w = r.get("w_max_abs_err")
    return "%s, w err %s%s" % (r.get("verdict"), ("%.1e" % w) if w is not None else "-",
                               "" if r.get("deterministic", True) else ", NON-det")


if "gating" in R:
    generic_table("top-k gating, graph replay, us per call (softmax: renormalized top-k; dsv3: sigmoid + bias, 8 "
                  "groups / 4 kept, top-8, renormalized, x2.5)", R["gating"], ["project", "vllm", "sglang", "torch"])
    check_summary("gating checks vs an fp64 reference (id sets per token; 'ties' = tokens whose set differs, all "
                  "within the tie threshold when ok; weights matched by id)", R.get("gating_check", {}), fmt_gate)

if "align_ep" in R:
    generic_table("align with an expert map (one EP rank), graph replay, us per call (block 64; SGLang: the caller's "
                  "map then its align with E_local+1; torch: map + sort)", R["align_ep"],
                  ["project", "project+positions", "vllm", "sglang", "torch"])
    check_summary("align_ep checks (project: bit-exact vs the stable reference incl. token_positions; peers: "
                  "grouping invariants)", R.get("align_ep_check", {}), fmt_ok)

if "route" in R:
    generic_table("route (logits -> top-k -> aligned layout), graph replay, us per call, bf16 logits, block 64",
                  R["route"], ["project route", "project gating+align_ep", "vllm", "sglang", "torch"],
                  base="project route")
    check_summary("route checks (project: route == gating + align_ep bit for bit, align == stable reference; "
                  "peers: layout invariants over their own ids)", R.get("route_check", {}), fmt_ok)

if "datapath" in R:
    for key, title, impls, byt in [
            ("permute", "moe_permute (hidden rows -> expert-grouped layout)",
             ["project", "project align_ep+permute", "vllm (sort+permute)", "torch index_select", "copy of the bytes"],
             "permute_bytes"),
            ("combine_flat", "moe_combine, FLAT layout (weighted sum of each token's k rows)",
             ["project", "vllm unpermute (identity map)", "torch", "copy of the bytes"], "combine_bytes"),
            ("combine_permuted", "moe_combine, PERMUTED layout (rows gathered through token_positions)",
             ["project", "vllm unpermute", "torch gather", "copy of the bytes"], "combine_bytes")]:
        rows = {}
        for name, row in R["datapath"].items():
            if isinstance(row, dict) and key in row:
                rows[name] = row[key]
            elif isinstance(row, dict) and "error" in row:
                rows[name] = {"error": row["error"]}
        generic_table(title + ", graph replay, us per call", rows, impls,
                      peers=[i for i in impls if not i.startswith("project") and not i.startswith("copy")])
        P("GB/s (project / copy of the same bytes): " + "; ".join(
            "%s: %.0f / %.0f" % (name, R["datapath"][name][byt] / (cell_us(r.get("project")) * 1e3),
                                 R["datapath"][name][byt] / (cell_us(r.get("copy of the bytes")) * 1e3))
            for name, r in rows.items() if cell_us(r.get("project")) and cell_us(r.get("copy of the bytes"))))
        P()
    check_summary("datapath checks (permute: rows vs hidden[sorted // topk]; combine: vs an fp32-sequential "
                  "reference and fp64)", R.get("datapath_check", {}), fmt_ok)

if R.get("skipped"):
    P("Skipped for the time budget: " + "; ".join(R["skipped"]))
    P()
if R.get("part_status"):
    P("Part status: " + "; ".join("%s: %s" % kv for kv in R["part_status"].items()))
if R.get("missing_symbols"):
    P("Missing symbols: " + ", ".join(R["missing_symbols"]))
