"""Independent NumPy oracles of the library's operations, written from routing.h's contract (and issues 27/28
for the newer operations), not from its code. On the CPU backend the library is the reference, so these are
what the Python package is checked against, bit for bit where the contract fixes the bits."""

import numpy as np


def max_padded(numel, groups, block_size):
    return numel + min(numel, groups) * (block_size - 1)


def align(ids, num_experts, block_size, expert_map=None, num_local=None):
    """(sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts, token_positions), at full capacity.

    Groups are by expert (or by local index through expert_map), ascending; inside a group the flat indices
    ascend; each group is padded to a multiple of block_size with the sentinel numel; an empty group takes no
    block; the tail is the sentinel / -1."""
    flat = np.asarray(ids).reshape(-1).astype(np.int64)
    n = flat.size
    groups = num_experts if num_local is None else num_local
    key = flat.copy()
    valid = (flat >= 0) & (flat < num_experts)
    if expert_map is not None:
        emap = np.asarray(expert_map).astype(np.int64)
        key = np.where(valid, emap[np.clip(flat, 0, num_experts - 1)], -1)
        valid &= (key >= 0) & (key < groups)
    cap = max_padded(n, groups, block_size)
    blocks = -(-cap // block_size)
    sorted_ids = np.full(cap, n, np.int32)
    expert_ids = np.full(blocks, -1, np.int32)
    positions = np.full(n, -1, np.int32)
    idx = np.nonzero(valid)[0]
    idx = idx[np.argsort(key[idx], kind="stable")]
    counts = np.bincount(key[idx], minlength=groups).astype(np.int64)
    padded = -(-counts // block_size) * block_size
    starts = np.concatenate([[0], np.cumsum(padded)[:-1]]) if groups else np.zeros(0, np.int64)
    group_first = np.concatenate([[0], np.cumsum(counts)[:-1]]) if groups else np.zeros(0, np.int64)
    k = key[idx]
    pos = starts[k] + (np.arange(idx.size) - group_first[k])
    sorted_ids[pos] = idx
    positions[idx] = pos
    total = int(padded.sum())
    expert_ids[: total // block_size] = np.repeat(np.arange(groups), padded // block_size)
    return sorted_ids, expert_ids, np.array([total], np.int32), counts.astype(np.int32), positions


# ---- floating point: fp32 accumulation in a fixed order, one rounding to the output type -------------------------

QNAN32 = np.uint32(0x7FC00000)


def bf16_to_f32(u16):
    return (np.asarray(u16, np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(f):
    """Round fp32 to bfloat16 bits, to nearest even; NaN canonical (0x7FC0)."""
    u = np.ascontiguousarray(f, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), r)


def to_f32(x, dtype):
    return bf16_to_f32(x) if dtype == "bfloat16" else np.asarray(x).astype(np.float32)


def from_f32(acc, dtype):
    """The bits of acc rounded to dtype, NaN canonical, as a uint array."""
    if dtype == "bfloat16":
        return f32_to_bf16(acc)
    if dtype == "float16":
        h = acc.astype(np.float16).view(np.uint16)
        return np.where(np.isnan(acc), np.uint16(0x7E00), h)
    u = acc.astype(np.float32).view(np.uint32)
    return np.where(np.isnan(acc), QNAN32, u)


def moe_sum(x, dtype):
    """x [T, K, H] (bfloat16 given as uint16 bits) -> the bits of the output [T, H]."""
    xf = to_f32(x, dtype)
    acc = np.zeros((xf.shape[0], xf.shape[2]), np.float32)
    for k in range(xf.shape[1]):
        acc = (acc + xf[:, k]).astype(np.float32)
    return from_f32(acc, dtype)


def permute(hidden, sorted_ids, post, topk):
    """The rows [0, post) of the permuted layout of hidden [T, H] (any dtype); rows past post are unspecified."""
    t = hidden.shape[0]
    out = np.zeros((int(post),) + hidden.shape[1:], hidden.dtype)
    for p in range(int(post)):
        i = int(sorted_ids[p])
        if i < t * topk:
            out[p] = hidden[i // topk]
    return out


def combine(rows, dtype, num_tokens, topk, positions=None, weights=None, scale=1.0, layout="flat"):
    """The bits of output[t] = round(fl32(acc * scale)), acc = fl32(acc + fl32(w * x)) over present k."""
    r = to_f32(rows, dtype).reshape(-1, rows.shape[-1])
    out = np.zeros((num_tokens, r.shape[1]), np.float32)
    w = None if weights is None else np.asarray(weights, np.float32).reshape(num_tokens, topk)
    pos = None if positions is None else np.asarray(positions).reshape(num_tokens, topk)
    for t in range(num_tokens):
        acc = np.zeros(r.shape[1], np.float32)
        for k in range(topk):
            if layout == "flat":
                if pos is not None and pos[t, k] < 0:
                    continue
                src = r[t * topk + k]
            else:
                if pos[t, k] < 0:
                    continue
                src = r[pos[t, k]]
            term = src if w is None else (np.float32(w[t, k]) * src).astype(np.float32)
            acc = (acc + term).astype(np.float32)
        out[t] = (acc * np.float32(scale)).astype(np.float32)
    return from_f32(out, dtype)


def topk_gating(logits, topk, score="softmax", num_groups=1, topk_groups=1, bias=None, renormalize=False,
                scale=1.0):
    """(ids, weights) by the contract of issue 28, with NumPy's exp (not the library's): ids exact where the
    scores are separated, weights to about 1e-6 relative."""
    lg = np.asarray(logits, np.float32)
    t, e = lg.shape
    if score == "softmax":
        m = lg.max(axis=1, keepdims=True)
        ex = np.exp((lg - m).astype(np.float32)).astype(np.float32)
        s = (ex / ex.sum(axis=1, keepdims=True, dtype=np.float32)).astype(np.float32)
    elif score == "sigmoid":
        s = (1.0 / (1.0 + np.exp(-lg))).astype(np.float32)
    else:
        s = lg.copy()
    b = s + (np.zeros(e, np.float32) if bias is None else np.asarray(bias, np.float32))
    ids = np.zeros((t, topk), np.int32)
    w = np.zeros((t, topk), np.float32)
    for row in range(t):
        cand = np.arange(e)
        if num_groups > 1:
            g = e // num_groups
            gs = []
            for gi in range(num_groups):
                v = np.sort(b[row, gi * g:(gi + 1) * g])[::-1]
                gs.append(v[0] + (v[1] if g > 1 else 0.0))
            keep = sorted(range(num_groups), key=lambda gi: (-gs[gi], gi))[:topk_groups]
            cand = np.concatenate([np.arange(gi * g, (gi + 1) * g) for gi in sorted(keep)])
        order = sorted(cand, key=lambda x: (-b[row, x], x))[:topk]
        ids[row] = order
        if score == "softmax_topk":
            v = lg[row, order]
            ex = np.exp(v - v.max())
            w[row] = ex / ex.sum()
        else:
            w[row] = s[row, order]
            if renormalize:
                w[row] = w[row] / w[row].sum()
        w[row] = w[row] * np.float32(scale)
    return ids, w
