#!/usr/bin/env python3
"""Markdown tables from many.json (bench_many.py):  python3 report_many.py many.json > many.md"""
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

    P()

# ---------------------------------------------------------------------------------------------------------------
# bench_many.py (many experts): python3 report.py many.json
# ---------------------------------------------------------------------------------------------------------------
if "many_time" in R:
    MT, MC, MM = R["many_time"], R.get("many_check", {}), R.get("many_meta", {})
    order = []
    for row in list(MT.values()) + list(MC.values()):
        for i in row:
            if i not in order:
                order.append(i)
    LABEL = {"project": "project", "sglang": "SGLang (v2 > 1024)", "vllm": "vLLM", "vllm_lora_tok": "vLLM LoRA, token map",
             "vllm_lora_slot": "vLLM LoRA, slot map", "torch": "pure PyTorch"}
    lab = lambda i: LABEL.get(i, LABEL.get(i.split("@")[0], i) + (" " + i.split("@")[1] if "@" in i else ""))
    peers_m = [i for i in order if i != "project"]

    def cell(name, i):
        v, raw = us_of(MT.get(name, {}).get(i))
        chk = MC.get(name, {}).get(i, {})
        if v is None:
            if isinstance(raw, str) and raw.startswith("n/a"):
                return "n/a", None
            return ("err" if raw is not None else "-"), None
        bad = bool(chk.get("errors"))
        return f(v) + (" FAIL" if bad else ""), v

    cfg = R.get("many_config", {})
    P("### many experts: align_block_size, graph replay, us per call (block %s, top-%s, int32 ids; same-run ratios = "
      "peer / project, > 1: project faster)" % (cfg.get("block", 64), cfg.get("topk", 8)))
    P()
    P("| shape (T x k / E draw) | " + " | ".join(lab(i) for i in order) + " | " +
      " | ".join("%s / project" % lab(i) for i in peers_m) + " |")
    P("|---|" + "---:|" * (len(order) + len(peers_m)))
    for name in MT:
        cells, vals = [], {}
        for i in order:
            c, v = cell(name, i)
            cells.append(c)
            vals[i] = v
        pr = vals.get("project")
        ratios = [("%.2f" % (vals[i] / pr)) if (vals.get(i) and pr) else "-" for i in peers_m]
        P("| %s | %s | %s |" % (name, " | ".join(cells), " | ".join(ratios)))
    P()
    P("Mapping of each shape onto vLLM's LoRA align (max_loras x experts per adapter = E) and output size "
      "(sorted_token_ids + expert_ids, millions of int32):")
    P()
    P("| shape | LoRA split | 'lora' draw | " + " | ".join(lab(i) for i in order) + " |")
    P("|---|---|---|" + "---:|" * len(order))
    for name, m in MM.items():
        sp = ", ".join("%s: %d x %d" % (k.replace("vllm_lora_tok", "LoRA"), v["max_loras"], v["experts_per_adapter"])
                       for k, v in m.get("lora_splits", {}).items()) or "-"
        dr = ("%d adapters x %d" % (m["lora_draw_adapters"], m["lora_draw_experts_per_adapter"])
              if m.get("lora_draw_adapters") else "uniform")
        oi = m.get("out_ints", {})
        P("| %s | %s | %s | %s |" % (name, sp, dr, " | ".join(
            ("%.3g" % (oi[i] / 1e6)) if i in oi else "-" for i in order)))
    P()
    P("### many experts: correctness (%s fresh draws per shape, outputs poisoned with -7; each draw run twice and "
      "byte-compared)" % cfg.get("draws", 2))
    P()
    P("| shape | " + " | ".join(lab(i) for i in order) + " |")
    P("|---|" + "---|" * len(order))
    why = {}
    for name, row in MC.items():
        cells = []
        for i in order:
            r = row.get(i)
            if r is None:
                cells.append("-")
                continue
            if r.get("unsupported"):
                why.setdefault(i, set()).add(r["unsupported"])
                cells.append("n/a")
                continue
            s = "ok" if not r["errors"] else "FAIL (%s)" % "; ".join(r["errors"][:2])
            s += ", det" if r["deterministic"] else ", NON-det"
            cells.append(s)
        P("| %s | %s |" % (name, " | ".join(cells)))
    P()
    for i, ws in why.items():
        P("- %s n/a: %s" % (lab(i), "; ".join(sorted(ws))))
    P()
    if "many_seconds" in R:
        P("bench_many.py ran %.0f s." % R["many_seconds"])
