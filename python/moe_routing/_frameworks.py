"""The caller's array framework: which one an array belongs to, where its memory is, which stream it computes
on, how to allocate outputs like it, and the workspace cache. Used by the generic (DLPack) API in ``_api``;
PyTorch tensors take ``moe_routing.torch``'s path instead."""

import math
import sys

from . import _ext
from ._errors import InvalidArgument

_HOST = _ext.MEMORY == "host"


def framework(x):
    """'numpy', 'cupy', 'jax', 'torch' or 'other' (any other DLPack / buffer-protocol producer)."""
    root = type(x).__module__.partition(".")[0]
    if root in ("numpy", "cupy", "torch"):
        return root
    if root in ("jax", "jaxlib"):
        return "jax"
    return "other"


def is_torch(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def shape_of(x, what):
    try:
        return tuple(int(d) for d in x.shape)
    except (AttributeError, TypeError):
        raise InvalidArgument(f"{what} must be an array with a shape, got {type(x).__name__}") from None


def numel(shape):
    return math.prod(shape)


def _jax_device(x):
    devs = x.devices() if callable(getattr(x, "devices", None)) else {x.device}
    return next(iter(devs))


class Call:
    """One call's context, from its first array argument: framework, device key and stream."""

    __slots__ = ("fw", "device", "stream", "gpu")

    def __init__(self, x, stream, what):
        fw = framework(x)
        self.fw = fw
        if fw == "cupy":
            self.gpu = True
            self.device = ("cuda", int(x.device.id))
        elif fw == "jax":
            d = _jax_device(x)
            self.gpu = d.platform in ("gpu", "cuda", "rocm")
            self.device = ("cuda", int(d.id)) if self.gpu else ("cpu", 0)
            if self.gpu:
                # JAX tracks its own streams and exposes none: wait until x is computed (a host
                # synchronisation: JAX arrays are never captured in CUDA graphs), then run on CuPy's stream.
                x.block_until_ready()
        else:
            self.gpu = not _HOST
            self.device = ("cpu", 0) if _HOST else ("cuda", _current_device())
        if stream is None:
            stream = _cupy().cuda.get_current_stream().ptr if self.gpu and fw in ("cupy", "jax") else 0
        elif not isinstance(stream, int):
            stream = int(getattr(stream, "ptr", getattr(stream, "cuda_stream", stream)))
        self.stream = 0 if _HOST else stream

    def arg(self, x):
        """What to hand to _ext for array x: a DLPack capsule made for this call's stream where the producer
        synchronises streams (CuPy), else x itself (nanobind takes __dlpack__ or the buffer protocol)."""
        if self.fw == "cupy" and framework(x) == "cupy":
            # DLPack: 1 names the legacy default stream (0 is reserved); the producer makes it wait for its own.
            return x.__dlpack__(stream=self.stream if self.stream != 0 else 1)
        return x

    def empty(self, shape, dtype):
        """An output array like the input's framework (JAX: NumPy / CuPy, converted back by result())."""
        if self.fw == "numpy" or (not self.gpu and self.fw in ("jax", "other")):
            import numpy

            return numpy.empty(shape, dtype)
        if self.fw in ("cupy", "jax"):
            cp = _cupy()
            with cp.cuda.Device(self.device[1]):
                return cp.empty(shape, dtype)
        raise InvalidArgument(
            f"cannot allocate outputs for arrays of {self.fw!r} in device memory: pass out=, or use "
            "NumPy, CuPy, PyTorch or JAX arrays"
        )

    def result(self, arr):
        if self.fw == "jax" and arr is not None:
            import jax

            return jax.dlpack.from_dlpack(arr)
        return arr


def _cupy():
    try:
        import cupy
    except ImportError:  # pragma: no cover - depends on the machine
        raise InvalidArgument("JAX arrays in GPU memory need CuPy to allocate the outputs") from None
    return cupy


def _current_device():
    cp = sys.modules.get("cupy")
    if cp is not None:
        return int(cp.cuda.runtime.getDevice())
    return 0


# Workspace cache: one buffer per (device, stream, operation, shape), kept for the life of the process so that a
# steady-state call allocates nothing beyond its outputs, and a CUDA graph that captured a workspace's address
# can be replayed at any time. Keyed on the stream too: two streams never share scratch.
_workspaces = {}


def workspace(call, op, shape, nbytes):
    if nbytes == 0:
        return None
    key = (call.device, call.stream, op, shape)
    ws = _workspaces.get(key)
    if ws is None:
        # MOE_WORKSPACE_ALIGNMENT (256): allocate that much more and hand out the aligned slice
        raw = call.empty((nbytes + 256,), "uint8")
        off = (-_address(raw)) % 256
        ws = raw[off:off + nbytes]
        _workspaces[key] = ws
    return ws


def _address(a):
    """Device or host address of a 1-D array's first element (numpy, CuPy, torch)."""
    if hasattr(a, "data_ptr"):
        return a.data_ptr()
    if hasattr(a, "__array_interface__"):
        return a.__array_interface__["data"][0]
    if hasattr(a, "__cuda_array_interface__"):
        return a.__cuda_array_interface__["data"][0]
    raise TypeError(f"cannot take the address of {type(a)}")


def clear_workspace_cache():
    """Drop every cached workspace (generic and PyTorch paths). Unsafe while a captured CUDA graph that used one
    may still be replayed: the graph keeps the address, not the buffer."""
    _workspaces.clear()
    t = sys.modules.get("moe_routing.torch")
    if t is not None:
        t._clear_workspaces()
