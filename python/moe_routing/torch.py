"""moe_routing for PyTorch: the operations as custom operators (``torch.ops.moe_routing.*``) with fake
implementations, for ``torch.compile(fullgraph=True)`` and ``torch.cuda.graph`` capture, and vLLM's
``moe_align_block_size`` as a drop-in.

Tensors are passed to the library by pointer (no DLPack capsule), on the current stream of their device
(``torch.cuda.current_stream()``) unless ``stream=`` (an int ``cudaStream_t``) is given; nothing synchronises
with the host. In eager mode the Python functions here call the library directly (the lowest overhead); while
``torch.compile`` traces them they call the registered operators. Workspaces are cached per (device, stream,
operation, shape), so a steady-state call allocates its outputs only (with ``out=``, nothing).

Operators (each also has an ``_out`` form writing caller tensors, as vLLM's ops do):
``align_block_size``, ``moe_sum``, and where this build has them ``align_block_size_ep``, ``permute``,
``combine``, ``topk_gating``, ``route``.
"""

from typing import List, Optional, Tuple

import torch

from . import _ext, _torch_cpp
from ._errors import InvalidArgument, NotAvailable, Unsupported

Tensor = torch.Tensor

_HOST = _ext.MEMORY == "host"
_D = _ext.DTYPES
_CODES = {
    torch.int8: _D["int8"], torch.uint8: _D["uint8"], torch.int16: _D["int16"], torch.int32: _D["int32"],
    torch.int64: _D["int64"], torch.float32: _D["float32"], torch.float16: _D["float16"],
    torch.bfloat16: _D["bfloat16"],
}
if "float8_e4m3" in _D and hasattr(torch, "float8_e4m3fn"):
    _CODES[torch.float8_e4m3fn] = _D["float8_e4m3"]
    _CODES[torch.float8_e5m2] = _D["float8_e5m2"]
_ID_TYPES = {torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64}
_VALUE_TYPES = {torch.float32, torch.float16, torch.bfloat16}
# permute copies bytes: a dtype the library does not name travels as the integer type of its size.
_BYTES_AS = {1: _D["int8"], 2: _D["int16"], 4: _D["int32"], 8: _D["int64"]}

try:
    _raw_stream = torch._C._cuda_getCurrentRawStream  # what Inductor's generated code calls
except AttributeError:  # pragma: no cover - older/odd builds
    _raw_stream = None

_is_compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling


def _stream(device, stream):
    if _HOST:
        return 0
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def _check(t, what):
    """t is a tensor in this build's memory space (CPU; or the current CUDA device) and C-contiguous."""
    if not isinstance(t, Tensor):
        raise InvalidArgument(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    dev = t.device
    if _HOST:
        if dev.type != "cpu":
            raise InvalidArgument(
                f"{what} must be a CPU tensor (this build's backend is {_ext.backend_name()}), got {dev}")
    elif dev.type != "cuda":
        raise InvalidArgument(f"{what} must be a CUDA tensor (this build's backend is {_ext.backend_name()}), got {dev}")
    elif dev.index != torch.cuda.current_device():
        raise InvalidArgument(
            f"{what} is on {dev} but the current device is cuda:{torch.cuda.current_device()} "
            "(the library runs on the current device: use torch.cuda.device(...))")
    if not t.is_contiguous():
        raise InvalidArgument(f"{what} must be contiguous (got strides {tuple(t.stride())} for shape {tuple(t.shape)})")


def _check_out(t, what, dtype, min_numel, device, capacity):
    _check(t, what)
    if t.dtype != dtype:
        raise InvalidArgument(f"{what} must be {dtype}, got {t.dtype}")
    if t.device != device:
        raise InvalidArgument(f"{what} is on {t.device}, not on the inputs' device {device}")
    if t.numel() < min_numel:
        raise InvalidArgument(
            f"{what} has {t.numel()} elements, fewer than the {min_numel} this call writes ({capacity})")


def _out(out, n, what):
    """out= as n tensors (a tuple or list of them), with the generic API's message otherwise."""
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise InvalidArgument(f"out= of {what} must be a tuple of {n} arrays")
    return out


def _ptr(t):
    return 0 if t is None else t.data_ptr()


# ---- operators: C++ (csrc/torch_ops.cpp) where built, else registered from Python ---------------------------

_CPP = _torch_cpp.load()  # torch.ops.moe_routing.align_block_size and moe_sum are C++
_CPP_OPS = ("align_block_size", "moe_sum")  # the _out forms: Python-registered (see csrc/torch_ops.cpp)


def _define(name, fn, fake, mutates_args=()):
    """The operator moe_routing::name, with fake as its fake (meta) implementation: the C++ one when built,
    else fn (annotated: its schema) registered from Python. Returns what to call in eager mode."""
    if _CPP and name in _CPP_OPS:
        torch.library.register_fake(f"moe_routing::{name}", fake)
        return getattr(torch.ops.moe_routing, name).default
    op = torch.library.custom_op(f"moe_routing::{name}", fn, mutates_args=mutates_args)
    op.register_fake(fake)
    return op


# ---- capacities: Python arithmetic (traceable, SymInt-friendly) mirroring routing.h ---------------------------

def _max_padded(numel, num_experts, block_size):
    return numel + torch.sym_min(numel, num_experts) * (block_size - 1)


def _cdiv(a, b):
    return (a + b - 1) // b


_caps_cache = {}


def _align_caps(numel, num_experts, block_size):
    key = (numel, num_experts, block_size)
    caps = _caps_cache.get(key)
    if caps is None:
        caps = (_ext.align_max_padded(*key), _ext.align_max_blocks(*key), _ext.align_workspace_size(*key))
        if len(_caps_cache) > 4096:
            _caps_cache.clear()
        _caps_cache[key] = caps
    return caps


# Workspace cache: one uint8 tensor per (device, stream, op, shape), kept for the process (see
# moe_routing.clear_workspace_cache); a graph that captured a workspace's address stays valid.
_workspaces = {}


def _workspace_cache_size():
    """Workspaces held: the Python path's and the C++ operators'."""
    return len(_workspaces) + (torch.ops.moe_routing._workspace_cache_size() if _CPP else 0)


def _clear_workspaces():
    _workspaces.clear()
    if _CPP:
        torch.ops.moe_routing._clear_workspace_cache()


def _workspace(device, stream, op, key, nbytes):
    if nbytes == 0:
        return None
    k = (device, stream, op, key)
    ws = _workspaces.get(k)
    if ws is None:
        # MOE_WORKSPACE_ALIGNMENT (256): allocate that much more and hand out the aligned slice
        raw = torch.empty(nbytes + 256, dtype=torch.uint8, device=device)
        off = (-raw.data_ptr()) % 256
        ws = raw[off:off + nbytes]
        _workspaces[k] = ws
    return ws


# ---- align_block_size -----------------------------------------------------------------------------------------

def _align_impl(topk_ids, num_experts, block_size, out=None, stream=None):
    _check(topk_ids, "topk_ids")
    if topk_ids.dtype not in _ID_TYPES:
        raise Unsupported(
            f"topk_ids must have an integer dtype (int8, uint8, int16, int32, int64), got {topk_ids.dtype}")
    numel = topk_ids.numel()
    padded, blocks, ws_bytes = _align_caps(numel, num_experts, block_size)
    dev = topk_ids.device
    if out is None:
        s = torch.empty(padded, dtype=torch.int32, device=dev)
        e = torch.empty(blocks, dtype=torch.int32, device=dev)
        p = torch.empty(1, dtype=torch.int32, device=dev)
    else:
        s, e, p = _out(out, 3, "align_block_size")
        _check_out(s, "sorted_token_ids", torch.int32, padded, dev, "align_max_padded")
        _check_out(e, "expert_ids", torch.int32, blocks, dev, "align_max_blocks")
        _check_out(p, "num_tokens_post_pad", torch.int32, 1, dev, "one int32")
    st = _stream(dev, stream)
    ws = _workspace(dev, st, "align", (numel, num_experts, block_size), ws_bytes)
    _ext.align_block_size_ptr(topk_ids.data_ptr(), _CODES[topk_ids.dtype], numel, num_experts, block_size,
                              s.data_ptr(), e.data_ptr(), p.data_ptr(), _ptr(ws), ws_bytes, st)
    return s, e, p


def _align_py(topk_ids: Tensor, num_experts: int, block_size: int) -> Tuple[Tensor, Tensor, Tensor]:
    return _align_impl(topk_ids, num_experts, block_size)


def _align_fake(topk_ids, num_experts, block_size):
    padded = _max_padded(topk_ids.numel(), num_experts, block_size)
    return (topk_ids.new_empty(padded, dtype=torch.int32),
            topk_ids.new_empty(_cdiv(padded, block_size), dtype=torch.int32),
            topk_ids.new_empty(1, dtype=torch.int32))


def _align_out_py(topk_ids: Tensor, num_experts: int, block_size: int, sorted_token_ids: Tensor,
                  expert_ids: Tensor, num_tokens_post_pad: Tensor) -> None:
    _align_impl(topk_ids, num_experts, block_size, (sorted_token_ids, expert_ids, num_tokens_post_pad))


def _none_fake(*args):
    return None


_align_op = _define("align_block_size", _align_py, _align_fake)
_align_out_op = _define("align_block_size_out", _align_out_py, _none_fake,
                        ("sorted_token_ids", "expert_ids", "num_tokens_post_pad"))


def align_block_size(topk_ids, num_experts, block_size, *, out=None, stream=None):
    """moe_routing.align_block_size on a tensor: (sorted_token_ids, expert_ids, num_tokens_post_pad), int32 of
    lengths align_max_padded(numel, num_experts, block_size), align_max_blocks(...) and 1; or written into
    out=(s, e, p). Stable and deterministic: inside each expert's group, flat indices ascend."""
    if _is_compiling():
        if out is None:
            return torch.ops.moe_routing.align_block_size(topk_ids, num_experts, block_size)
        torch.ops.moe_routing.align_block_size_out(topk_ids, num_experts, block_size, *out)
        return tuple(out)
    if _CPP and stream is None and out is None:  # one dispatch into csrc/torch_ops.cpp; a failure: re-run below
        try:  # (a tensor of another device type would go to that key's kernel: a meta tensor to the fake one)
            if topk_ids.is_cpu if _HOST else topk_ids.is_cuda:
                return _align_op(topk_ids, num_experts, block_size)
        except Exception:
            pass
    return _align_impl(topk_ids, num_experts, block_size, out, stream)


# ---- moe_sum --------------------------------------------------------------------------------------------------

def _sum_impl(x, out=None, stream=None):
    _check(x, "x")
    if x.dtype not in _VALUE_TYPES:
        raise Unsupported(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() != 3:
        raise InvalidArgument(f"x must have shape (num_tokens, topk, hidden), got shape {tuple(x.shape)}")
    t, k, h = x.shape
    if out is None:
        out = torch.empty((t, h), dtype=x.dtype, device=x.device)
    else:
        _check(out, "out")
        if out.dtype != x.dtype:
            raise InvalidArgument(f"out must be {x.dtype} (x's dtype), got {out.dtype}")
        if tuple(out.shape) != (t, h):
            raise InvalidArgument(f"out must have shape ({t}, {h}) = (num_tokens, hidden), got {tuple(out.shape)}")
        if out.device != x.device:
            raise InvalidArgument(f"out is on {out.device}, not on x's device {x.device}")
    _ext.moe_sum_ptr(x.data_ptr(), _CODES[x.dtype], t, k, h, out.data_ptr(), _stream(x.device, stream))
    return out


def _sum_py(x: Tensor) -> Tensor:
    return _sum_impl(x)


def _sum_fake(x):
    return x.new_empty((x.shape[0], x.shape[2]))


def _sum_backward(ctx, grad):
    return grad.unsqueeze(1).expand(ctx.shape)


def _sum_setup(ctx, inputs, output):
    ctx.shape = inputs[0].shape


def _sum_out_py(x: Tensor, out: Tensor) -> None:
    _sum_impl(x, out)


_sum_op = _define("moe_sum", _sum_py, _sum_fake)
torch.library.register_autograd("moe_routing::moe_sum", _sum_backward, setup_context=_sum_setup)
_sum_out_op = _define("moe_sum_out", _sum_out_py, _none_fake, ("out",))


def moe_sum(x, *, out=None, stream=None):
    """x [num_tokens, topk, hidden] summed over topk, in order, in fp32, rounded once (fp32/fp16/bf16).
    Differentiable (the gradient of each slot is the output's gradient)."""
    if _is_compiling():
        if out is None:
            return torch.ops.moe_routing.moe_sum(x)
        torch.ops.moe_routing.moe_sum_out(x, out)
        return out
    if out is None and x.requires_grad and torch.is_grad_enabled():
        return _sum_op(x)
    if _CPP and stream is None and out is None:  # as align_block_size
        try:
            if (x.is_cpu if _HOST else x.is_cuda) and x.dim() == 3:
                return _sum_op(x)
        except Exception:
            pass
    return _sum_impl(x, out, stream)


# ---- vLLM's moe_align_block_size --------------------------------------------------------------------------------

def moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False,
                         ignore_invalid_experts=False, *, num_local_experts=None):
    """A drop-in for vLLM's ``moe_align_block_size`` (vllm.model_executor.layers.fused_moe.moe_align_block_size):
    same arguments, same returns, same shapes.

    Returns (sorted_ids, expert_ids, num_tokens_post_pad): sorted_ids int32 of length
    ``topk_ids.numel() + num_experts * (block_size - 1)`` (rounded up to a multiple of block_size with
    pad_sorted_ids), the flat index of each entry grouped by expert and each group padded with the sentinel
    ``topk_ids.numel()`` to a multiple of block_size, sentinel-filled past the groups; expert_ids int32 of
    ``ceil(len(sorted_ids) / block_size)`` entries, the expert of each block; num_tokens_post_pad int32 (1,).

    Differences from vLLM (see README): inside each expert's group the flat indices ascend (stable and
    deterministic; vLLM's order there depends on atomics); ids outside [0, num_experts) are always dropped
    (ignore_invalid_experts is accepted and has no further effect); expert_ids past the used blocks hold -1
    (vLLM: 0). With expert_map (int32 [num_experts]: local index or -1), ids are grouped by LOCAL index and
    entries of other ranks are dropped before padding, so expert_ids hold local indices, no block is spent on
    remote experts and num_tokens_post_pad counts local entries only (vLLM's older path aligned every entry
    and then marked remote blocks -1). num_local_experts bounds the local indices (default num_experts, which
    reads nothing from the map: no host synchronisation)."""
    numel = topk_ids.numel()
    length = numel + num_experts * (block_size - 1)
    if pad_sorted_ids:
        length = _cdiv(length, block_size) * block_size
    nblocks = _cdiv(length, block_size)
    groups = num_experts if num_local_experts is None else num_local_experts
    cap = _max_padded(numel, groups, block_size)
    if (expert_map is None and num_local_experts is None and length == cap and nblocks == _cdiv(cap, block_size)
            and not _is_compiling()):
        # vLLM's lengths are the library's capacities (numel >= num_experts, no extra padding): the allocating
        # operator (one C++ dispatch when csrc/torch_ops.cpp is built) returns exactly these shapes
        return align_block_size(topk_ids, num_experts, block_size)
    dev = topk_ids.device
    # Past the library's capacity nothing is written: pre-fill there (one fill each, only when needed).
    if length > cap:
        s = torch.full((length,), numel, dtype=torch.int32, device=dev)
    else:
        s = torch.empty(length, dtype=torch.int32, device=dev)
    if nblocks > _cdiv(cap, block_size):
        e = torch.full((nblocks,), -1, dtype=torch.int32, device=dev)
    else:
        e = torch.empty(nblocks, dtype=torch.int32, device=dev)
    p = torch.empty(1, dtype=torch.int32, device=dev)
    if expert_map is None and num_local_experts is None:
        align_block_size(topk_ids, num_experts, block_size, out=(s, e, p))
    else:
        if not hasattr(_ext, "align_block_size_ep"):
            raise NotAvailable("moe_align_block_size with expert_map needs moe_align_block_size_ep, which this "
                               "build of the library does not have")
        align_block_size_ep(topk_ids, num_experts, block_size, expert_map, groups, out=(s, e, p, None, None))
    return s, e, p


# ---- the data path (issue 27) ---------------------------------------------------------------------------------

def _need(name):
    if not hasattr(_ext, name):
        raise NotAvailable(f"moe_routing.torch.{name} is not in this build (routing.h has no moe_{name})")


def _num_local(num_experts, expert_map, num_local_experts):
    if num_local_experts is not None:
        return int(num_local_experts)
    if expert_map is None:
        return int(num_experts)
    raise InvalidArgument("num_local_experts is required with expert_map (reading it from the map would "
                          "synchronise with the device)")


def _align_ep_impl(topk_ids, num_experts, block_size, expert_map, num_local, with_counts, with_positions,
                   out=None, stream=None):
    _need("align_block_size_ep")
    _check(topk_ids, "topk_ids")
    if topk_ids.dtype not in _ID_TYPES:
        raise Unsupported(
            f"topk_ids must have an integer dtype (int8, uint8, int16, int32, int64), got {topk_ids.dtype}")
    dev = topk_ids.device
    if expert_map is not None:
        _check_out(expert_map, "expert_map", torch.int32, num_experts, dev, "num_experts")
        if expert_map.dim() != 1 or expert_map.numel() != num_experts:
            raise InvalidArgument(f"expert_map must have shape ({num_experts},), got {tuple(expert_map.shape)}")
    numel = topk_ids.numel()
    key = (numel, num_experts, num_local, block_size)
    caps = _caps_cache.get(("ep",) + key)
    if caps is None:
        caps = (_ext.align_max_padded(numel, num_local, block_size), _ext.align_max_blocks(numel, num_local, block_size),
                _ext.align_workspace_size_ep(*key))
        _caps_cache[("ep",) + key] = caps
    padded, blocks, ws_bytes = caps
    if out is None:
        s = torch.empty(padded, dtype=torch.int32, device=dev)
        e = torch.empty(blocks, dtype=torch.int32, device=dev)
        p = torch.empty(1, dtype=torch.int32, device=dev)
        c = torch.empty(num_local, dtype=torch.int32, device=dev) if with_counts else None
        t = torch.empty(topk_ids.shape, dtype=torch.int32, device=dev) if with_positions else None
    else:
        s, e, p, c, t = _out(out, 5, "align_block_size_ep")
        _check_out(s, "sorted_token_ids", torch.int32, padded, dev, "align_max_padded")
        _check_out(e, "expert_ids", torch.int32, blocks, dev, "align_max_blocks")
        _check_out(p, "num_tokens_post_pad", torch.int32, 1, dev, "one int32")
        if c is not None:
            _check_out(c, "expert_counts", torch.int32, num_local, dev, "num_local_experts")
        if t is not None:
            _check_out(t, "token_positions", torch.int32, numel, dev, "numel")
    st = _stream(dev, stream)
    ws = _workspace(dev, st, "align_ep", key, ws_bytes)
    _ext.align_block_size_ep_ptr(topk_ids.data_ptr(), _CODES[topk_ids.dtype], numel, num_experts, _ptr(expert_map),
                                 num_local, block_size, s.data_ptr(), e.data_ptr(), p.data_ptr(), _ptr(c), _ptr(t),
                                 _ptr(ws), ws_bytes, st)
    return s, e, p, c, t


def _empty0(like):
    return like.new_empty(0, dtype=torch.int32)


@torch.library.custom_op("moe_routing::align_block_size_ep", mutates_args=())
def _align_ep_op(topk_ids: Tensor, num_experts: int, block_size: int, expert_map: Optional[Tensor],
                 num_local_experts: int, with_counts: bool, with_positions: bool) -> List[Tensor]:
    s, e, p, c, t = _align_ep_impl(topk_ids, num_experts, block_size, expert_map, num_local_experts, with_counts,
                                   with_positions)
    return [s, e, p, _empty0(topk_ids) if c is None else c, _empty0(topk_ids) if t is None else t]


@_align_ep_op.register_fake
def _(topk_ids, num_experts, block_size, expert_map, num_local_experts, with_counts, with_positions):
    padded = _max_padded(topk_ids.numel(), num_local_experts, block_size)
    i32 = dict(dtype=torch.int32)
    return [topk_ids.new_empty(padded, **i32), topk_ids.new_empty(_cdiv(padded, block_size), **i32),
            topk_ids.new_empty(1, **i32), topk_ids.new_empty(num_local_experts if with_counts else 0, **i32),
            topk_ids.new_empty(topk_ids.shape if with_positions else (0,), **i32)]


@torch.library.custom_op("moe_routing::align_block_size_ep_out",
                         mutates_args=("sorted_token_ids", "expert_ids", "num_tokens_post_pad", "expert_counts",
                                       "token_positions"))
def _align_ep_out_op(topk_ids: Tensor, num_experts: int, block_size: int, expert_map: Optional[Tensor],
                     num_local_experts: int, sorted_token_ids: Tensor, expert_ids: Tensor,
                     num_tokens_post_pad: Tensor, expert_counts: Optional[Tensor],
                     token_positions: Optional[Tensor]) -> None:
    _align_ep_impl(topk_ids, num_experts, block_size, expert_map, num_local_experts, False, False,
                   (sorted_token_ids, expert_ids, num_tokens_post_pad, expert_counts, token_positions))


@_align_ep_out_op.register_fake
def _(*args):
    return None


def align_block_size_ep(topk_ids, num_experts, block_size, expert_map=None, num_local_experts=None, *,
                        with_counts=False, with_positions=False, out=None, stream=None):
    """moe_routing.align_block_size_ep on tensors: (sorted_token_ids, expert_ids, num_tokens_post_pad,
    expert_counts or None, token_positions or None)."""
    local = _num_local(num_experts, expert_map, num_local_experts)
    if _is_compiling():
        if out is None:
            s, e, p, c, t = torch.ops.moe_routing.align_block_size_ep(
                topk_ids, num_experts, block_size, expert_map, local, with_counts, with_positions)
            return s, e, p, c if with_counts else None, t if with_positions else None
        torch.ops.moe_routing.align_block_size_ep_out(topk_ids, num_experts, block_size, expert_map, local, *out)
        return tuple(out)
    return _align_ep_impl(topk_ids, num_experts, block_size, expert_map, local, with_counts, with_positions, out,
                          stream)


def _permute_impl(hidden, sorted_token_ids, num_tokens_post_pad, topk, out=None, stream=None):
    _need("permute")
    _check(hidden, "hidden")
    if hidden.dim() != 2:
        raise InvalidArgument(f"hidden must have shape (num_tokens, hidden_size), got {tuple(hidden.shape)}")
    dev = hidden.device
    _check_out(sorted_token_ids, "sorted_token_ids", torch.int32, 0, dev, "")
    _check_out(num_tokens_post_pad, "num_tokens_post_pad", torch.int32, 1, dev, "one int32")
    code = _CODES.get(hidden.dtype)
    if code is None:
        code = _BYTES_AS.get(hidden.element_size())
        if code is None:
            raise Unsupported(f"hidden's dtype {hidden.dtype} has no element size of 1, 2, 4 or 8 bytes")
    rows = sorted_token_ids.numel()
    t, h = hidden.shape
    if out is None:
        out = torch.empty((rows, h), dtype=hidden.dtype, device=dev)
    else:
        _check(out, "out")
        if out.dtype != hidden.dtype:
            raise InvalidArgument(f"out must be {hidden.dtype} (hidden's dtype), got {out.dtype}")
        if out.dim() != 2 or out.shape[1] != h or out.shape[0] < rows:
            raise InvalidArgument(f"out must have shape (max_rows, {h}) with max_rows >= {rows} "
                                  f"(len(sorted_token_ids)), got {tuple(out.shape)}")
    _ext.permute_ptr(hidden.data_ptr(), code, t, h, int(topk), sorted_token_ids.data_ptr(),
                     num_tokens_post_pad.data_ptr(), out.shape[0], out.data_ptr(), _stream(dev, stream))
    return out


@torch.library.custom_op("moe_routing::permute", mutates_args=())
def _permute_op(hidden: Tensor, sorted_token_ids: Tensor, num_tokens_post_pad: Tensor, topk: int) -> Tensor:
    return _permute_impl(hidden, sorted_token_ids, num_tokens_post_pad, topk)


@_permute_op.register_fake
def _(hidden, sorted_token_ids, num_tokens_post_pad, topk):
    return hidden.new_empty((sorted_token_ids.numel(), hidden.shape[1]))


@torch.library.custom_op("moe_routing::permute_out", mutates_args=("out",))
def _permute_out_op(hidden: Tensor, sorted_token_ids: Tensor, num_tokens_post_pad: Tensor, topk: int,
                    out: Tensor) -> None:
    _permute_impl(hidden, sorted_token_ids, num_tokens_post_pad, topk, out)


@_permute_out_op.register_fake
def _(*args):
    return None


def permute(hidden, sorted_token_ids, num_tokens_post_pad, topk, *, out=None, stream=None):
    """moe_routing.permute on tensors: [len(sorted_token_ids), hidden_size] (rows past num_tokens_post_pad
    are not written)."""
    if _is_compiling():
        if out is None:
            return torch.ops.moe_routing.permute(hidden, sorted_token_ids, num_tokens_post_pad, topk)
        torch.ops.moe_routing.permute_out(hidden, sorted_token_ids, num_tokens_post_pad, topk, out)
        return out
    return _permute_impl(hidden, sorted_token_ids, num_tokens_post_pad, topk, out, stream)


_LAYOUTS = {"flat": 0, "permuted": 1}


def _combine_dims(rows, topk_weights, token_positions, topk, layout):
    if layout not in _LAYOUTS:
        raise InvalidArgument(f"layout must be 'flat' or 'permuted', got {layout!r}")
    if topk is None:
        for a in (topk_weights, token_positions):
            if a is not None and a.dim() == 2:
                topk = a.shape[1]
                break
    if topk is None and layout == "flat" and rows.dim() == 3:
        topk = rows.shape[1]
    if topk is None:
        raise InvalidArgument("topk is needed: pass topk=, or topk_weights / token_positions of shape (num_tokens, topk)")
    if topk < 1:
        raise InvalidArgument(f"topk must be >= 1, got {topk}")
    if layout == "flat":
        n = rows.shape[0] if rows.dim() == 3 else rows.shape[0] // topk
    else:
        if token_positions is None:
            raise InvalidArgument("layout 'permuted' needs token_positions")
        n = token_positions.numel() // topk
    return n, topk


def _combine_impl(rows, topk_weights, token_positions, topk, layout, scale, out=None, stream=None):
    _need("combine")
    _check(rows, "rows")
    if rows.dtype not in _VALUE_TYPES:
        raise Unsupported(f"rows must be float32, float16 or bfloat16, got {rows.dtype}")
    if rows.dim() not in (2, 3):
        raise InvalidArgument(f"rows must have shape (rows, hidden) or (num_tokens, topk, hidden), got "
                              f"{tuple(rows.shape)}")
    n, k = _combine_dims(rows, topk_weights, token_positions, topk, layout)
    h = rows.shape[-1]
    dev = rows.device
    if layout == "flat" and rows.shape[0] * (rows.shape[1] if rows.dim() == 3 else 1) != n * k:
        raise InvalidArgument(f"rows must have num_tokens * topk = {n * k} rows in layout 'flat', got "
                              f"{tuple(rows.shape)}")
    for a, what, dt in ((topk_weights, "topk_weights", torch.float32), (token_positions, "token_positions",
                                                                         torch.int32)):
        if a is not None:  # the exact count first: the generic API's message for a short or a long array
            _check(a, what)
            if a.numel() != n * k:
                raise InvalidArgument(f"{what} must have num_tokens * topk = {n * k} elements, got {a.numel()}")
            _check_out(a, what, dt, n * k, dev, "num_tokens * topk")
    if out is None:
        out = torch.empty((n, h), dtype=rows.dtype, device=dev)
    else:
        _check(out, "out")
        if out.dtype != rows.dtype:
            raise InvalidArgument(f"out must be {rows.dtype} (rows' dtype), got {out.dtype}")
        if tuple(out.shape) != (n, h):
            raise InvalidArgument(f"out must have shape ({n}, {h}) = (num_tokens, hidden), got {tuple(out.shape)}")
    _ext.combine_ptr(rows.data_ptr(), _CODES[rows.dtype], _LAYOUTS[layout], n, k, h, _ptr(token_positions),
                     _ptr(topk_weights), float(scale), out.data_ptr(), _stream(dev, stream))
    return out


@torch.library.custom_op("moe_routing::combine", mutates_args=())
def _combine_op(rows: Tensor, topk_weights: Optional[Tensor], token_positions: Optional[Tensor], topk: int,
                layout: str, scale: float) -> Tensor:
    return _combine_impl(rows, topk_weights, token_positions, topk, layout, scale)


@_combine_op.register_fake
def _(rows, topk_weights, token_positions, topk, layout, scale):
    n, _k = _combine_dims(rows, topk_weights, token_positions, topk, layout)
    return rows.new_empty((n, rows.shape[-1]))


@torch.library.custom_op("moe_routing::combine_out", mutates_args=("out",))
def _combine_out_op(rows: Tensor, topk_weights: Optional[Tensor], token_positions: Optional[Tensor], topk: int,
                    layout: str, scale: float, out: Tensor) -> None:
    _combine_impl(rows, topk_weights, token_positions, topk, layout, scale, out)


@_combine_out_op.register_fake
def _(*args):
    return None


def combine(rows, topk_weights=None, token_positions=None, *, topk=None, layout="flat", scale=1.0, out=None,
            stream=None):
    """moe_routing.combine on tensors: [num_tokens, hidden] of rows' dtype."""
    if _is_compiling():
        _n, k = _combine_dims(rows, topk_weights, token_positions, topk, layout)
        if out is None:
            return torch.ops.moe_routing.combine(rows, topk_weights, token_positions, k, layout, float(scale))
        torch.ops.moe_routing.combine_out(rows, topk_weights, token_positions, k, layout, float(scale), out)
        return out
    return _combine_impl(rows, topk_weights, token_positions, topk, layout, scale, out, stream)


# ---- gating (issue 28) ----------------------------------------------------------------------------------------

_SCORES = {"softmax": 0, "sigmoid": 1, "softmax_topk": 2}


def _gate(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor):
    if score not in _SCORES:
        raise InvalidArgument(f"score must be one of {sorted(_SCORES)}, got {score!r}")
    return (int(topk), _SCORES[score], int(num_groups), int(num_groups if topk_groups is None else topk_groups),
            1 if renormalize else 0, float(routed_scaling_factor))


def _check_logits(logits, correction_bias):
    _check(logits, "logits")
    if logits.dtype not in _VALUE_TYPES:
        raise Unsupported(f"logits must be float32, float16 or bfloat16, got {logits.dtype}")
    if logits.dim() != 2:
        raise InvalidArgument(f"logits must have shape (num_tokens, num_experts), got {tuple(logits.shape)}")
    if correction_bias is not None:  # the exact shape first, as the generic API checks it
        _check(correction_bias, "correction_bias")
        if correction_bias.numel() != logits.shape[1]:
            raise InvalidArgument(f"correction_bias must have shape ({logits.shape[1]},), got "
                                  f"{tuple(correction_bias.shape)}")
        _check_out(correction_bias, "correction_bias", torch.float32, logits.shape[1], logits.device, "num_experts")


def _gating_impl(logits, gate, correction_bias, out=None, stream=None):
    _need("topk_gating")
    _check_logits(logits, correction_bias)
    t, e = logits.shape
    k = gate[0]
    dev = logits.device
    if out is None:
        ids = torch.empty((t, k), dtype=torch.int32, device=dev)
        w = torch.empty((t, k), dtype=torch.float32, device=dev)
    else:
        ids, w = _out(out, 2, "topk_gating")
        _check_out(ids, "topk_ids", torch.int32, t * k, dev, "num_tokens * topk")
        _check_out(w, "topk_weights", torch.float32, t * k, dev, "num_tokens * topk")
    _ext.topk_gating_ptr(logits.data_ptr(), _CODES[logits.dtype], t, e, *gate[:4], _ptr(correction_bias), *gate[4:],
                         ids.data_ptr(), w.data_ptr(), _stream(dev, stream))
    return ids, w


@torch.library.custom_op("moe_routing::topk_gating", mutates_args=())
def _gating_op(logits: Tensor, topk: int, score: str, num_groups: int, topk_groups: int,
               correction_bias: Optional[Tensor], renormalize: bool,
               routed_scaling_factor: float) -> Tuple[Tensor, Tensor]:
    return _gating_impl(logits, _gate(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor),
                        correction_bias)


@_gating_op.register_fake
def _(logits, topk, score, num_groups, topk_groups, correction_bias, renormalize, routed_scaling_factor):
    t = logits.shape[0]
    return logits.new_empty((t, topk), dtype=torch.int32), logits.new_empty((t, topk), dtype=torch.float32)


def topk_gating(logits, topk, *, score="softmax", num_groups=1, topk_groups=None, correction_bias=None,
                renormalize=False, routed_scaling_factor=1.0, out=None, stream=None):
    """moe_routing.topk_gating on tensors: (topk_ids int32, topk_weights fp32), each [num_tokens, topk]."""
    gate = _gate(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor)
    if _is_compiling() and out is None:
        return torch.ops.moe_routing.topk_gating(logits, gate[0], score, gate[2], gate[3], correction_bias,
                                                 bool(renormalize), gate[5])
    return _gating_impl(logits, gate, correction_bias, out, stream)


def _route_impl(logits, gate, correction_bias, expert_map, num_local, block_size, with_positions, out=None,
                stream=None):
    _need("route")
    _check_logits(logits, correction_bias)
    t, e = logits.shape
    k = gate[0]
    dev = logits.device
    if expert_map is not None:
        _check_out(expert_map, "expert_map", torch.int32, e, dev, "num_experts")
    key = ("route", t, e) + gate + (num_local, block_size)
    caps = _caps_cache.get(key)
    if caps is None:
        caps = (_ext.align_max_padded(t * k, num_local, block_size), _ext.align_max_blocks(t * k, num_local, block_size),
                _ext.route_workspace_size(t, e, *gate, num_local, block_size))
        _caps_cache[key] = caps
    padded, blocks, ws_bytes = caps
    if out is None:
        ids = torch.empty((t, k), dtype=torch.int32, device=dev)
        w = torch.empty((t, k), dtype=torch.float32, device=dev)
        s = torch.empty(padded, dtype=torch.int32, device=dev)
        x = torch.empty(blocks, dtype=torch.int32, device=dev)
        p = torch.empty(1, dtype=torch.int32, device=dev)
        pos = torch.empty((t, k), dtype=torch.int32, device=dev) if with_positions else None
    else:
        ids, w, s, x, p, pos = _out(out, 6, "route")
        _check_out(ids, "topk_ids", torch.int32, t * k, dev, "num_tokens * topk")
        _check_out(w, "topk_weights", torch.float32, t * k, dev, "num_tokens * topk")
        _check_out(s, "sorted_token_ids", torch.int32, padded, dev, "align_max_padded")
        _check_out(x, "expert_ids", torch.int32, blocks, dev, "align_max_blocks")
        _check_out(p, "num_tokens_post_pad", torch.int32, 1, dev, "one int32")
        if pos is not None:
            _check_out(pos, "token_positions", torch.int32, t * k, dev, "num_tokens * topk")
    st = _stream(dev, stream)
    ws = _workspace(dev, st, "route", key, ws_bytes)
    _ext.route_ptr(logits.data_ptr(), _CODES[logits.dtype], t, e, *gate[:4], _ptr(correction_bias), *gate[4:],
                   _ptr(expert_map), num_local, block_size, ids.data_ptr(), w.data_ptr(), s.data_ptr(), x.data_ptr(),
                   p.data_ptr(), _ptr(pos), _ptr(ws), ws_bytes, st)
    return ids, w, s, x, p, pos


@torch.library.custom_op("moe_routing::route", mutates_args=())
def _route_op(logits: Tensor, topk: int, block_size: int, expert_map: Optional[Tensor], num_local_experts: int,
              score: str, num_groups: int, topk_groups: int, correction_bias: Optional[Tensor], renormalize: bool,
              routed_scaling_factor: float, with_positions: bool) -> List[Tensor]:
    gate = _gate(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor)
    ids, w, s, x, p, pos = _route_impl(logits, gate, correction_bias, expert_map, num_local_experts, block_size,
                                       with_positions)
    return [ids, w, s, x, p, _empty0(logits) if pos is None else pos]


@_route_op.register_fake
def _(logits, topk, block_size, expert_map, num_local_experts, score, num_groups, topk_groups, correction_bias,
      renormalize, routed_scaling_factor, with_positions):
    t = logits.shape[0]
    padded = _max_padded(t * topk, num_local_experts, block_size)
    i32 = dict(dtype=torch.int32)
    return [logits.new_empty((t, topk), **i32), logits.new_empty((t, topk), dtype=torch.float32),
            logits.new_empty(padded, **i32), logits.new_empty(_cdiv(padded, block_size), **i32),
            logits.new_empty(1, **i32), logits.new_empty((t, topk) if with_positions else (0,), **i32)]


def route(logits, topk, block_size, *, expert_map=None, num_local_experts=None, score="softmax", num_groups=1,
          topk_groups=None, correction_bias=None, renormalize=False, routed_scaling_factor=1.0, with_positions=True,
          out=None, stream=None):
    """moe_routing.route on tensors: (topk_ids, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_pad,
    token_positions or None)."""
    gate = _gate(topk, score, num_groups, topk_groups, renormalize, routed_scaling_factor)
    local = _num_local(logits.shape[1], expert_map, num_local_experts)
    if _is_compiling() and out is None:
        ids, w, s, x, p, pos = torch.ops.moe_routing.route(
            logits, gate[0], block_size, expert_map, local, score, gate[2], gate[3], correction_bias,
            bool(renormalize), gate[5], bool(with_positions))
        return ids, w, s, x, p, pos if with_positions else None
    return _route_impl(logits, gate, correction_bias, expert_map, local, block_size, with_positions, out, stream)


def available(op):
    """Whether operation `op` (e.g. 'permute') is in this build."""
    return hasattr(_ext, op)
