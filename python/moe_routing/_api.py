"""The operations on any DLPack array (NumPy, CuPy, JAX, anything with __dlpack__ or the buffer protocol).

PyTorch tensors are handed to ``moe_routing.torch``, which passes them by pointer (no DLPack capsule) on the
current stream. Shapes, semantics and errors are those of the C API in ``core/include/moe/routing.h``."""

import functools

from . import _ext
from ._errors import InvalidArgument, NotAvailable
from ._frameworks import Call, clear_workspace_cache, is_torch, numel, shape_of, workspace

__all__ = [
    "backend_name",
    "backend_check",
    "available",
    "clear_workspace_cache",
    "align_max_padded",
    "align_max_blocks",
    "align_workspace_size",
    "align_block_size",
    "moe_sum",
    "align_workspace_size_ep",
    "align_block_size_ep",
    "permute",
    "combine",
    "topk_gating",
    "route_workspace_size",
    "route",
    "SCORES",
]

# Operations of the C API and the _ext function each needs: those added by issues 27 and 28 are compiled only
# when the routing.h the package was built from declares them.
_OPS = {
    "align_block_size": "align_block_size",
    "moe_sum": "moe_sum",
    "align_block_size_ep": "align_block_size_ep",
    "permute": "permute",
    "combine": "combine",
    "topk_gating": "topk_gating",
    "route": "route",
}
SCORES = {"softmax": 0, "sigmoid": 1, "softmax_topk": 2}


def backend_name():
    """'cpu', 'cuda', 'hip' or 'kokkos': the backend this package's library was built for."""
    return _ext.backend_name()


def backend_check():
    """Raise BackendError when the backend cannot run here (e.g. a CUDA build on a machine without a GPU)."""
    _ext.backend_check()


_EP_TRANSPORTS = {"ep_mpi": 0, "ep_nccl": 1}


def available(op):
    """Whether operation `op` (e.g. 'permute') is in this build; 'ep': moe_routing.ep's bindings, 'ep_mpi' /
    'ep_nccl': its communicators over that transport (the library built with MOE_WITH_MPI / MOE_WITH_NCCL)."""
    if op == "ep":
        return hasattr(_ext, "EpHandle")
    if op in _EP_TRANSPORTS:
        return hasattr(_ext, "ep_transport_available") and bool(_ext.ep_transport_available(_EP_TRANSPORTS[op]))
    return hasattr(_ext, _OPS.get(op, op))


def _need(op):
    if not hasattr(_ext, op):
        raise NotAvailable(
            f"moe_routing.{op} is not in this build: the library's routing.h it was built from does not declare "
            f"moe_{op} (rebuild the package from a newer moe-routing)"
        )


def _torch():
    from . import torch as t

    return t


@functools.lru_cache(maxsize=1024)
def _align_caps(n, num_experts, block_size):
    return (
        _ext.align_max_padded(n, num_experts, block_size),
        _ext.align_max_blocks(n, num_experts, block_size),
        _ext.align_workspace_size(n, num_experts, block_size),
    )


def align_max_padded(numel, num_experts, block_size):
    """numel + min(numel, num_experts) * (block_size - 1): the length of sorted_token_ids."""
    return _ext.align_max_padded(numel, num_experts, block_size)


def align_max_blocks(numel, num_experts, block_size):
    """ceil(align_max_padded(...) / block_size): the length of expert_ids."""
    return _ext.align_max_blocks(numel, num_experts, block_size)


def align_workspace_size(numel, num_experts, block_size):
    """Bytes of scratch align_block_size needs for this shape on this backend (the package manages it)."""
    return _ext.align_workspace_size(numel, num_experts, block_size)


def _out_tuple(out, n, what):
    if out is None:
        return (None,) * n
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise InvalidArgument(f"out= of {what} must be a tuple of {n} arrays")
    return tuple(out)


def align_block_size(topk_ids, num_experts, block_size, *, out=None, stream=None):
    """Group the router's (token, expert) entries by expert, each group padded to a multiple of block_size.

    topk_ids: integer array (int8/uint8/int16/int32/int64), any shape, C-contiguous; its numel flat entries.
    Returns (sorted_token_ids, expert_ids, num_tokens_post_pad): int32 arrays of the input's framework of the full
    capacities the C API writes, align_max_padded(...), align_max_blocks(...) and (1,). out=: a tuple of three
    int32 1-D arrays at least that long (checked). Ids outside [0, num_experts) are dropped."""
    if is_torch(topk_ids):
        return _torch().align_block_size(topk_ids, num_experts, block_size, out=out, stream=stream)
    call = Call(topk_ids, stream, "topk_ids")
    n = numel(shape_of(topk_ids, "topk_ids"))
    padded, blocks, ws_bytes = _align_caps(n, num_experts, block_size)
    s, e, p = _out_tuple(out, 3, "align_block_size")
    fresh = out is None
    if fresh:
        s, e, p = call.empty((padded,), "int32"), call.empty((blocks,), "int32"), call.empty((1,), "int32")
    ws = workspace(call, "align", (n, num_experts, block_size), ws_bytes)
    _ext.align_block_size(
        call.arg(topk_ids), num_experts, block_size, call.arg(s), call.arg(e), call.arg(p),
        None if ws is None else call.arg(ws), call.stream,
    )
    if fresh:
        return call.result(s), call.result(e), call.result(p)
    return s, e, p


def moe_sum(x, *, out=None, stream=None):
    """out[t, h] = sum over k, in order, of x[t, k, h], accumulated in fp32 and rounded once (fp32/fp16/bf16).

    x: [num_tokens, topk, hidden], C-contiguous. Returns [num_tokens, hidden] of x's dtype (or writes out=)."""
    if is_torch(x):
        return _torch().moe_sum(x, out=out, stream=stream)
    call = Call(x, stream, "x")
    shape = shape_of(x, "x")
    fresh = out is None
    if fresh:
        if len(shape) != 3:
            raise InvalidArgument(f"x must have shape (num_tokens, topk, hidden), got shape {shape}")
        out = call.empty((shape[0], shape[2]), x.dtype)
    _ext.moe_sum(call.arg(x), call.arg(out), call.stream)
    return call.result(out) if fresh else out


# ---- the data path (issue 27): expert maps, token positions, permute, weighted combine ----------------------


@functools.lru_cache(maxsize=1024)
def _align_ep_caps(n, num_experts, num_local, block_size):
    _need("align_block_size_ep")
    return (
        _ext.align_max_padded(n, num_local, block_size),
        _ext.align_max_blocks(n, num_local, block_size),
        _ext.align_workspace_size_ep(n, num_experts, num_local, block_size),
    )


def align_workspace_size_ep(numel, num_experts, num_local_experts, block_size):
    """Bytes of scratch align_block_size_ep needs for this shape on this backend."""
    _need("align_block_size_ep")
    return _ext.align_workspace_size_ep(numel, num_experts, num_local_experts, block_size)


def _num_local(num_experts, expert_map, num_local_experts):
    if num_local_experts is not None:
        return int(num_local_experts)
    if expert_map is None:
        return int(num_experts)
    raise InvalidArgument(
        "num_local_experts is required with expert_map (reading it from the map would synchronise with the "
        "device); pass num_experts when any local index below it may appear"
    )


def align_block_size_ep(topk_ids, num_experts, block_size, expert_map=None, num_local_experts=None, *,
                        with_counts=False, with_positions=False, out=None, stream=None):
    """align_block_size with expert parallelism: ids grouped and padded by LOCAL expert index.

    expert_map: int32 [num_experts], the local index of each global expert or -1 (another rank); None is the
    identity (num_local_experts = num_experts). Entries whose map value is outside [0, num_local_experts) are
    dropped. Returns (sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts, token_positions):
    capacities align_max_padded(numel, num_local_experts, block_size) and align_max_blocks(...); expert_counts
    int32 [num_local_experts] if with_counts else None; token_positions int32 of topk_ids' shape (the index p with
    sorted_token_ids[p] == i, or -1 when entry i was dropped) if with_positions else None. out=: a tuple of five
    (the last two None when not wanted)."""
    if is_torch(topk_ids):
        return _torch().align_block_size_ep(
            topk_ids, num_experts, block_size, expert_map, num_local_experts, with_counts=with_counts,
            with_positions=with_positions, out=out, stream=stream)
    _need("align_block_size_ep")
    call = Call(topk_ids, stream, "topk_ids")
    shape = shape_of(topk_ids, "topk_ids")
    n = numel(shape)
    local = _num_local(num_experts, expert_map, num_local_experts)
    padded, blocks, ws_bytes = _align_ep_caps(n, num_experts, local, block_size)
    s, e, p, c, t = _out_tuple(out, 5, "align_block_size_ep")
    fresh = out is None
    if fresh:
        s, e, p = call.empty((padded,), "int32"), call.empty((blocks,), "int32"), call.empty((1,), "int32")
        c = call.empty((local,), "int32") if with_counts else None
        t = call.empty(shape, "int32") if with_positions else None
    ws = workspace(call, "align_ep", (n, num_experts, local, block_size), ws_bytes)
    arg = lambda a: None if a is None else call.arg(a)  # noqa: E731
    _ext.align_block_size_ep(
        call.arg(topk_ids), num_experts, block_size, arg(expert_map), local, arg(s), arg(e), arg(p), arg(c),
        arg(t), arg(ws), call.stream,
    )
    res = (s, e, p, c, t)
    return tuple(call.result(a) for a in res) if fresh else res


def permute(hidden, sorted_token_ids, num_tokens_post_pad, topk, *, out=None, stream=None):
    """Rows of hidden [num_tokens, hidden_size] in the expert-grouped layout of sorted_token_ids.

    Returns permuted [len(sorted_token_ids), hidden_size] of hidden's dtype (any 1/2/4/8-byte dtype, fp8
    included: a copy of bytes): permuted[p] = hidden[sorted_token_ids[p] // topk] for p < num_tokens_post_pad
    (a row of zero bytes for a padding entry); rows from num_tokens_post_pad on are not written. out=: an array
    [max_rows, hidden_size] with max_rows >= len(sorted_token_ids)."""
    if is_torch(hidden):
        return _torch().permute(hidden, sorted_token_ids, num_tokens_post_pad, topk, out=out, stream=stream)
    _need("permute")
    call = Call(hidden, stream, "hidden")
    shape = shape_of(hidden, "hidden")
    fresh = out is None
    if fresh:
        if len(shape) != 2:
            raise InvalidArgument(f"hidden must have shape (num_tokens, hidden_size), got shape {shape}")
        rows = numel(shape_of(sorted_token_ids, "sorted_token_ids"))
        out = call.empty((rows, shape[1]), hidden.dtype)
    _ext.permute(call.arg(hidden), topk, call.arg(sorted_token_ids), call.arg(num_tokens_post_pad), call.arg(out),
                 call.stream)
    return call.result(out) if fresh else out


_LAYOUTS = {"flat": 0, "permuted": 1}


def _combine_dims(rows_shape, topk_weights, token_positions, topk, layout):
    """(num_tokens, topk) of a combine call, from whichever argument tells."""
    if topk is None:
        for a in (topk_weights, token_positions):
            if a is not None and len(shape_of(a, "topk_weights")) == 2:
                topk = shape_of(a, "topk_weights")[1]
                break
    if topk is None and layout == "flat" and len(rows_shape) == 3:
        topk = rows_shape[1]
    if topk is None:
        raise InvalidArgument("topk is needed: pass topk=, or topk_weights / token_positions of shape (num_tokens, topk)")
    topk = int(topk)
    if topk < 1:
        raise InvalidArgument(f"topk must be >= 1, got {topk}")
    if layout == "flat":
        n = rows_shape[0] if len(rows_shape) == 3 else rows_shape[0] // topk if rows_shape else 0
    else:
        src = token_positions if token_positions is not None else topk_weights
        if src is None:
            raise InvalidArgument("layout 'permuted' needs token_positions")
        n = numel(shape_of(src, "token_positions")) // topk
    return n, topk


def combine(rows, topk_weights=None, token_positions=None, *, topk=None, layout="flat", scale=1.0, out=None,
            stream=None):
    """output[t] = scale * sum over k, in order, of topk_weights[t, k] * rows[r(t, k)] (fp32 accumulation).

    layout 'flat': rows [num_tokens * topk, hidden] (or [num_tokens, topk, hidden]), r(t, k) = t * topk + k,
    a slot absent where token_positions (optional) holds -1. layout 'permuted': rows is the expert-grouped
    layout [max_rows, hidden], r(t, k) = token_positions[t, k] (required), absent when -1. Absent rows are
    never read; a token with no present slot gets zeros. topk_weights: fp32 [num_tokens, topk] or None (1).
    Returns [num_tokens, hidden] of rows' dtype (fp32/fp16/bf16)."""
    if is_torch(rows):
        return _torch().combine(rows, topk_weights, token_positions, topk=topk, layout=layout, scale=scale,
                                out=out, stream=stream)
    _need("combine")
    if layout not in _LAYOUTS:
        raise InvalidArgument(f"layout must be 'flat' or 'permuted', got {layout!r}")
    call = Call(rows, stream, "rows")
    shape = shape_of(rows, "rows")
    n, k = _combine_dims(shape, topk_weights, token_positions, topk, layout)
    fresh = out is None
    if fresh:
        out = call.empty((n, shape[-1] if shape else 0), rows.dtype)
    arg = lambda a: None if a is None else call.arg(a)  # noqa: E731
    _ext.combine(call.arg(rows), _LAYOUTS[layout], n, k, arg(token_positions), arg(topk_weights), float(scale),
                 call.arg(out), call.stream)
    return call.result(out) if fresh else out


# ---- gating (issue 28): router logits to top-k experts and weights, and the fused route ----------------------


def _gate_args(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor):
    if score not in SCORES:
        raise InvalidArgument(f"score must be one of {sorted(SCORES)}, got {score!r}")
    groups = int(num_groups)
    return (int(topk), SCORES[score], groups, groups if topk_groups is None else int(topk_groups),
            1 if renormalize else 0, float(routed_scaling_factor))


def topk_gating(logits, topk, *, score="softmax", num_groups=1, topk_groups=None, correction_bias=None,
                renormalize=False, routed_scaling_factor=1.0, out=None, stream=None):
    """Router logits [num_tokens, num_experts] (fp32/fp16/bf16) to (topk_ids int32, topk_weights fp32), each
    [num_tokens, topk], in descending selection score, ties to the lower index (moe_topk_gating).

    score: 'softmax', 'sigmoid' or 'softmax_topk'; num_groups / topk_groups: grouped selection (DeepSeek-V3),
    topk_groups defaults to num_groups; correction_bias: fp32 [num_experts] added for selection only."""
    if is_torch(logits):
        return _torch().topk_gating(logits, topk, score=score, num_groups=num_groups, topk_groups=topk_groups,
                                    correction_bias=correction_bias, renormalize=renormalize,
                                    routed_scaling_factor=routed_scaling_factor, out=out, stream=stream)
    _need("topk_gating")
    gate = _gate_args(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor)
    call = Call(logits, stream, "logits")
    shape = shape_of(logits, "logits")
    ids, w = _out_tuple(out, 2, "topk_gating")
    fresh = out is None
    if fresh:
        rows = shape[0] if shape else 0
        ids, w = call.empty((rows, gate[0]), "int32"), call.empty((rows, gate[0]), "float32")
    _ext.topk_gating(call.arg(logits), *gate[:4], None if correction_bias is None else call.arg(correction_bias),
                     *gate[4:], call.arg(ids), call.arg(w), call.stream)
    return (call.result(ids), call.result(w)) if fresh else (ids, w)


def route_workspace_size(num_tokens, num_experts, topk, block_size, *, num_local_experts=None, score="softmax",
                         num_groups=1, topk_groups=None, renormalize=False, routed_scaling_factor=1.0):
    """Bytes of scratch route needs for this shape on this backend."""
    _need("route")
    gate = _gate_args(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor)
    local = num_experts if num_local_experts is None else num_local_experts
    return _ext.route_workspace_size(num_tokens, num_experts, *gate, local, block_size)


def route(logits, topk, block_size, *, expert_map=None, num_local_experts=None, score="softmax", num_groups=1,
          topk_groups=None, correction_bias=None, renormalize=False, routed_scaling_factor=1.0,
          with_positions=True, out=None, stream=None):
    """topk_gating then align_block_size_ep in one call (moe_route).

    Returns (topk_ids, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_pad, token_positions);
    token_positions [num_tokens, topk] if with_positions else None. out=: a tuple of six."""
    if is_torch(logits):
        return _torch().route(logits, topk, block_size, expert_map=expert_map, num_local_experts=num_local_experts,
                              score=score, num_groups=num_groups, topk_groups=topk_groups,
                              correction_bias=correction_bias, renormalize=renormalize,
                              routed_scaling_factor=routed_scaling_factor, with_positions=with_positions, out=out,
                              stream=stream)
    _need("route")
    gate = _gate_args(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor)
    call = Call(logits, stream, "logits")
    shape = shape_of(logits, "logits")
    if len(shape) != 2:
        raise InvalidArgument(f"logits must have shape (num_tokens, num_experts), got shape {shape}")
    t, e = shape
    local = _num_local(e, expert_map, num_local_experts)
    n = t * gate[0]
    padded, blocks = _ext.align_max_padded(n, local, block_size), _ext.align_max_blocks(n, local, block_size)
    ws_bytes = _ext.route_workspace_size(t, e, *gate, local, block_size)
    ids, w, s, x, p, pos = _out_tuple(out, 6, "route")
    fresh = out is None
    if fresh:
        ids, w = call.empty((t, gate[0]), "int32"), call.empty((t, gate[0]), "float32")
        s, x, p = call.empty((padded,), "int32"), call.empty((blocks,), "int32"), call.empty((1,), "int32")
        pos = call.empty((t, gate[0]), "int32") if with_positions else None
    ws = workspace(call, "route", (t, e) + gate + (local, block_size), ws_bytes)
    arg = lambda a: None if a is None else call.arg(a)  # noqa: E731
    _ext.route(call.arg(logits), *gate[:4], arg(correction_bias), *gate[4:], arg(expert_map), local, block_size,
               arg(ids), arg(w), arg(s), arg(x), arg(p), arg(pos), arg(ws), call.stream)
    res = (ids, w, s, x, p, pos)
    return tuple(call.result(a) for a in res) if fresh else res
