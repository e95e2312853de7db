"""Expert parallelism across ranks: dispatch each token's row to the ranks that hold its experts, combine the
expert outputs back at the token's rank (moe/ep.h, moe/ep.hpp; every rule is documented once, in ep.h).

The names and semantics are those of ``moe::ep`` (ep.hpp)::

    from mpi4py import MPI
    import moe_routing.ep as ep

    comm = ep.Comm.from_mpi(MPI.COMM_WORLD, num_experts)        # collective; the caller keeps its communicator
    h = ep.Handle(comm, ep.Config(max_tokens=4096, hidden=7168, topk=8,
                                  dispatch_dtype="float16", combine_dtype="float16"))   # collective
    n = h.dispatch_layout(topk_ids)                               # int32 [num_tokens, topk]; n.recv_rows rows come
    recv_hidden, recv_scales, recv_ids, recv_weights = h.dispatch(hidden, topk_weights=w)
    # ... the experts on recv_hidden; recv_ids hold LOCAL expert indices (-1: not here): e.g.
    # moe_routing.align_block_size_ep(recv_ids, comm.num_local_experts(), bs, with_positions=True) -> permute ->
    # the experts -> one output row per present slot (flat [recv_rows * topk] rows, or permuted + token_positions)
    out = h.combine(expert_out, token_positions, w)              # [num_tokens, hidden], this rank's tokens

Every call of a handle is COLLECTIVE: every rank calls dispatch_layout, dispatch, combine in the same order, even
with no tokens (topk_ids of shape (0, topk)). Arrays are in this build's memory space (host for the CPU and
Kokkos backends: NumPy arrays, CPU tensors; the MPI transport hands them to MPI), C-contiguous. For the dtypes
NumPy lacks (bfloat16, fp8), integer arrays of the same size holding the bits are taken, and outputs are
allocated so (uint16 / uint8 in NumPy; PyTorch tensors get the real dtype).

Errors raise the package's exceptions, the same on every rank where ep.h says so: on MPI, an argument this
package refuses on one rank (a dtype, a shape) makes the call fail on every rank (that rank's text names the
argument, the others' name that rank), so no rank waits for one that gave up; the handle stays usable. Only a
combine on a rank with nothing to read or write completes on the other ranks while that rank raises.

Transports: ``available('ep_mpi')`` (this package was built with MPI: ``pip install .`` turns it on where CMake
finds MPI; ``-C cmake.define.MOE_WITH_MPI=ON`` insists), ``available('ep_nccl')`` (CUDA builds with
MOE_WITH_NCCL). Without one, ``Comm.from_mpi`` / ``Comm.from_nccl`` raise NotAvailable.
"""

import dataclasses
import operator
import sys
from typing import NamedTuple

from . import _ext
from ._errors import Error, InvalidArgument, NotAvailable
from ._frameworks import Call, framework, is_torch, shape_of

__all__ = ["Comm", "Config", "Counts", "Handle", "transport_available", "EXACT", "CAPACITY"]

_HAS_EP = hasattr(_ext, "EpHandle")
_TRANSPORTS = {"mpi": 0, "nccl": 1}
EXACT, CAPACITY = "exact", "capacity"
_MODES = {EXACT: 0, CAPACITY: 1}

# moe_dtype_t values (routing.h); fp8 (8, 9) as ep.h takes them, whether or not this routing.h names them.
_DTYPES = dict(getattr(_ext, "DTYPES", {}))
_DTYPES.setdefault("float8_e4m3", 8)
_DTYPES.setdefault("float8_e5m2", 9)
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}
_ALIASES = {"float8_e4m3fn": "float8_e4m3", "fp32": "float32", "fp16": "float16", "half": "float16",
            "bf16": "bfloat16", "float": "float32"}
_NUMPY_BITS = {"bfloat16": "uint16", "float8_e4m3": "uint8", "float8_e5m2": "uint8"}  # types NumPy lacks
_TORCH_NAMES = {"float8_e4m3": "float8_e4m3fn"}

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def transport_available(transport):
    """Whether this build has transport 'mpi' or 'nccl' (moe_ep_transport_available)."""
    if transport not in _TRANSPORTS:
        raise InvalidArgument(f"transport must be 'mpi' or 'nccl', got {transport!r}")
    return _HAS_EP and bool(_ext.ep_transport_available(_TRANSPORTS[transport]))


def _need(transport):
    if not _HAS_EP:
        raise NotAvailable("moe_routing.ep is not in this build: the library it was built from has no moe/ep.h")
    if not transport_available(transport):
        how = ("-DMOE_WITH_MPI=ON (pip: MPI found at build time, or -C cmake.define.MOE_WITH_MPI=ON)"
               if transport == "mpi" else "the CUDA backend and -DMOE_WITH_NCCL=ON")
        raise NotAvailable(f"this build of moe_routing has no {transport.upper()} transport (build it with {how})")


def _dtype_name(dt, what):
    """A dtype given as a name, a NumPy dtype or a torch dtype -> its routing.h name."""
    name = None
    if isinstance(dt, str):
        name = dt
    elif is_torch_dtype(dt):
        name = str(dt).rpartition(".")[2]
    else:
        try:
            import numpy

            name = numpy.dtype(dt).name
        except Exception:  # noqa: BLE001 - anything NumPy cannot read is not a dtype
            name = None
    name = _ALIASES.get(name, name)
    if name not in _DTYPES:
        raise InvalidArgument(f"{what} must be one of {sorted(_DTYPES)} (or a NumPy / torch dtype of one), got {dt!r}")
    return name


def is_torch_dtype(dt):
    t = sys.modules.get("torch")
    return t is not None and isinstance(dt, t.dtype)


def _int(v, what, lo, hi=None, bounds=_INT64):
    try:
        v = operator.index(v)
    except TypeError:
        raise InvalidArgument(f"{what} must be an integer, got {v!r}") from None
    hi = bounds[1] if hi is None else hi
    if not (max(lo, bounds[0]) <= v <= hi):
        raise InvalidArgument(f"{what} = {v} is outside [{lo}, {hi}]")
    return v


@dataclasses.dataclass
class Config:
    """The shape of one MoE layer's exchange (moe_ep_config_t). Every field must be equal on every rank, except
    max_tokens, max_recv_rows and max_recv_slots (per rank). Fields of the other mode are ignored.

    dispatch_dtype: of the dispatched rows, any routing.h dtype (copied as bytes); combine_dtype: of the expert
    outputs and the combined output, float32 / float16 / bfloat16; either as a name, a NumPy or a torch dtype.
    mode: 'exact' (one host synchronisation per layer, exactly-sized messages) or 'capacity' (capacity rows per
    pair of ranks, slot_capacity expert-output rows back; 0: capacity * min(topk, most local experts)).
    max_recv_rows / max_recv_slots (exact, per rank; 0: world * max_tokens, max_recv_rows * min(topk, local))."""

    max_tokens: int = 0
    hidden: int = 0
    topk: int = 1
    dispatch_dtype: object = "float32"
    combine_dtype: object = "float32"
    scales_per_token: int = 0
    mode: str = EXACT
    capacity: int = 0
    slot_capacity: int = 0
    max_recv_rows: int = 0
    max_recv_slots: int = 0

    def _c_args(self):
        """The fields as ep_handle_create takes them; InvalidArgument names a field that is not one."""
        if self.mode not in _MODES:
            raise InvalidArgument(f"mode must be 'exact' or 'capacity', got {self.mode!r}")
        return (
            _int(self.max_tokens, "max_tokens", _INT64[0]),
            _int(self.hidden, "hidden", _INT64[0]),
            _DTYPES[_dtype_name(self.dispatch_dtype, "dispatch_dtype")],
            _DTYPES[_dtype_name(self.combine_dtype, "combine_dtype")],
            _int(self.topk, "topk", _INT32[0], bounds=_INT32),
            _int(self.scales_per_token, "scales_per_token", _INT32[0], bounds=_INT32),
            _MODES[self.mode],
            _int(self.capacity, "capacity", _INT64[0]),
            _int(self.slot_capacity, "slot_capacity", _INT64[0]),
            _int(self.max_recv_rows, "max_recv_rows", _INT64[0]),
            _int(self.max_recv_slots, "max_recv_slots", _INT64[0]),
        )

    @classmethod
    def _from_ext(cls, d):
        d = dict(d)
        d["dispatch_dtype"] = _DTYPE_NAMES.get(d["dispatch_dtype"], d["dispatch_dtype"])
        d["combine_dtype"] = _DTYPE_NAMES.get(d["combine_dtype"], d["combine_dtype"])
        d["mode"] = {v: k for k, v in _MODES.items()}[d["mode"]]
        return cls(**d)


class Counts(NamedTuple):
    """What dispatch_layout returns (Handle::Counts)."""

    recv_rows: int   # exact: R, the rows this rank receives; capacity: world * capacity (the slab layout)
    recv_slots: int  # exact: the present local slots among them; capacity: world * slot_capacity


def _placement(num_experts, expert_rank, expert_local):
    """(num_experts, expert_rank int32 array or None, expert_local or None), checked for shape and range."""
    import numpy

    ne = _int(num_experts, "num_experts", 1, 65536)
    out = []
    for a, what in ((expert_rank, "expert_rank"), (expert_local, "expert_local")):
        if a is None:
            out.append(None)
            continue
        if is_torch(a):
            a = a.detach().cpu().numpy()
        arr = numpy.asarray(a)
        if arr.dtype.kind not in "iu":
            raise InvalidArgument(f"{what} must hold integers, got dtype {arr.dtype}")
        if arr.shape != (ne,):
            raise InvalidArgument(f"{what} must have shape ({ne},) = (num_experts,), got shape {arr.shape}")
        if arr.size and (arr.min() < _INT32[0] or arr.max() > _INT32[1]):
            raise InvalidArgument(f"{what} has values outside int32")
        out.append(numpy.ascontiguousarray(arr, numpy.int32))
    if out[0] is None and out[1] is not None:
        raise InvalidArgument("expert_local is given without expert_rank")
    return ne, out[0], out[1]


def _address(a):
    return 0 if a is None else int(a.__array_interface__["data"][0])


class Comm:
    """A caller's communicator plus the expert placement (moe::ep::Comm). Create it with from_mpi / from_nccl."""

    __slots__ = ("_c", "_keep")

    def __init__(self, *_args, **_kwargs):
        raise TypeError("use moe_routing.ep.Comm.from_mpi(comm, num_experts) (or from_nccl)")

    @classmethod
    def _wrap(cls, c, keep):
        self = object.__new__(cls)
        self._c = c
        self._keep = keep
        return self

    @classmethod
    def from_mpi(cls, comm, num_experts, expert_rank=None, expert_local=None):
        """COLLECTIVE over `comm`, an mpi4py intracommunicator the caller owns (MPI initialised; the library
        duplicates it and frees the duplicate with this object, never finalises MPI).

        num_experts: global experts. expert_rank (optional, [num_experts] integers): the rank of each expert;
        None: contiguous equal blocks (num_experts % world == 0). expert_local (optional): each expert's local
        index on its rank (None: a rank's experts numbered in ascending global order). Every rank passes the
        same values (checked: a mismatch fails on every rank)."""
        _need("mpi")
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is None or not isinstance(comm, mpi.Comm):
            raise InvalidArgument(f"comm must be an mpi4py communicator (mpi4py.MPI.Comm), got {type(comm).__name__}")
        if comm == mpi.COMM_NULL:
            raise InvalidArgument("comm is MPI.COMM_NULL")
        if comm.Is_inter():
            raise InvalidArgument("comm is an intercommunicator; dispatch and combine need an intracommunicator")
        address = mpi._addressof(comm)  # the address of its MPI_Comm: what moe_ep_comm_create_mpi takes
        try:
            ne, er, el = _placement(num_experts, expert_rank, expert_local)
        except Exception:
            try:  # every rank leaves the creation with an error (num_experts 0 is refused and agreed on)
                _ext.ep_comm_mpi(address, 0, 0, 0)
            except Error:
                pass
            raise
        try:
            c = _ext.ep_comm_mpi(address, ne, _address(er), _address(el))
        except InvalidArgument as e:
            if "not initialised" in str(e) and mpi.Is_initialized() and not mpi.Is_finalized():
                raise InvalidArgument(
                    f"{e} (but mpi4py's MPI is: moe_routing's extension was built against another MPI library than "
                    f"the one mpi4py loaded, {mpi.Get_library_version().splitlines()[0]!r}; rebuild one of them "
                    "against the other's MPI)") from None
            raise
        return cls._wrap(c, comm)

    @classmethod
    def from_nccl(cls, nccl_comm, num_experts, expert_rank=None, expert_local=None):
        """COLLECTIVE over an initialised ncclComm_t given as an integer address (e.g. CuPy's
        ``NcclCommunicator.comm()``), used as is on the current CUDA device; CUDA builds with MOE_WITH_NCCL.
        On NCCL, argument errors stay on the faulty rank (ep.h): the other ranks' transfers wait for it."""
        _need("nccl")
        ptr = _int(nccl_comm, "nccl_comm", 1)
        try:
            ne, er, el = _placement(num_experts, expert_rank, expert_local)
        except Exception:
            try:  # the other ranks' creation fails too (num_experts 0 travels in the exchanged descriptor)
                _ext.ep_comm_nccl(ptr, 0, 0, 0)
            except Error:
                pass
            raise
        return cls._wrap(_ext.ep_comm_nccl(ptr, ne, _address(er), _address(el)), None)

    @property
    def transport(self):
        """'mpi' or 'nccl'."""
        return self._c.transport

    def rank(self):
        return self._c.rank()

    def world_size(self):
        return self._c.world_size()

    def num_experts(self):
        return self._c.num_experts()

    def num_local_experts(self):
        return self._c.num_local_experts()

    def expert_map(self):
        """int32 [num_experts]: the local index of each global expert on this rank, or -1 (another rank holds
        it): the expert_map of align_block_size_ep for callers that keep global ids."""
        import numpy

        return numpy.asarray(self._c.expert_map(), numpy.int32)

    def local_experts(self):
        """int32 [num_local_experts]: the global id of each local expert."""
        import numpy

        return numpy.asarray(self._c.local_experts(), numpy.int32)

    def __repr__(self):
        return (f"moe_routing.ep.Comm({self.transport}, rank {self.rank()} of {self.world_size()}, "
                f"{self.num_local_experts()} of {self.num_experts()} experts)")


def _torch_dtype(name):
    import torch

    return getattr(torch, _TORCH_NAMES.get(name, name))


def _empty(like, shape, name):
    """An output like `like`'s framework: torch tensors of the real dtype, NumPy (or CuPy) arrays of it or, for
    the dtypes those lack, of the unsigned integer holding its bits."""
    if is_torch(like):
        import torch

        return torch.empty(shape, dtype=_torch_dtype(name), device=like.device)
    call = Call(like, None, "array")
    return call.empty(shape, _NUMPY_BITS.get(name, name))


class Handle:
    """One layer's exchange (moe::ep::Handle): staging in the backend's memory, the layout of the last
    dispatch_layout. Handle(comm, config) is COLLECTIVE; so are dispatch_layout, dispatch and combine."""

    __slots__ = ("_h", "_comm", "_tokens", "_counts", "_cfg")

    def __init__(self, comm, config=None, **fields):
        if not isinstance(comm, Comm):
            raise InvalidArgument(f"comm must be a moe_routing.ep.Comm, got {type(comm).__name__}")
        self._comm = comm
        self._h = None
        try:
            if config is None:
                config = Config(**fields)
            elif fields:
                config = dataclasses.replace(config, **fields)
            if not isinstance(config, Config):
                raise InvalidArgument(f"config must be a moe_routing.ep.Config, got {type(config).__name__}")
            args = config._c_args()
        except Exception as e:
            _ext.ep_handle_create_fail(comm._c)  # every rank leaves the creation with an error
            if isinstance(e, TypeError) and not isinstance(e, Error):  # an unknown field
                raise InvalidArgument(str(e)) from None
            raise
        self._h = _ext.ep_handle_create(comm._c, *args)
        self._cfg = Config._from_ext(self._h.config())
        self._tokens = None
        self._counts = None

    @property
    def comm(self):
        return self._comm

    def config(self):
        """The Config with the defaults (0 fields) resolved."""
        return dataclasses.replace(self._cfg)

    def recv_buffer_rows(self):
        """Rows the receive buffers of dispatch need at most."""
        return self._h.recv_buffer_rows()

    def staging_bytes(self):
        """The handle's own memory in the backend's space."""
        return self._h.staging_bytes()

    def _stream(self, x, stream):
        if is_torch(x):
            if stream is not None:
                return int(getattr(stream, "cuda_stream", stream))
            import torch

            return 0 if x.device.type == "cpu" else int(torch.cuda.current_stream(x.device).cuda_stream)
        return Call(x, stream, "array").stream

    def _arg(self, x):
        if x is None or is_torch(x) or framework(x) != "cupy":
            return x
        return Call(x, None, "array").arg(x)

    def _prepare(self, op, f):
        """f() in a context where any refusal makes the collective call fail on every rank."""
        try:
            return f()
        except Exception:
            self._h.fail(op)
            raise

    def dispatch_layout(self, topk_ids, *, stream=None):
        """COLLECTIVE. Which rows go where, for topk_ids int32 [num_tokens, topk] (global expert ids; ids
        outside [0, num_experts) fail on every rank). Returns Counts(recv_rows, recv_slots)."""
        self._tokens, self._counts = None, None
        s = self._prepare("dispatch_layout", lambda: self._stream(topk_ids, stream))
        r = self._h.dispatch_layout(self._arg(topk_ids), s)
        self._counts = Counts(*r)
        self._tokens = shape_of(topk_ids, "topk_ids")[0]
        return self._counts

    def dispatch(self, hidden, scales=None, topk_weights=None, *, out=None, stream=None):
        """COLLECTIVE. Sends the rows of the last layout: hidden [num_tokens, hidden] of dispatch_dtype, scales
        fp32 [num_tokens, scales_per_token] (None iff scales_per_token == 0), topk_weights fp32 [num_tokens, topk]
        (None: every weight received is 1).

        Returns (recv_hidden [R, hidden], recv_scales [R, scales_per_token] or None, recv_topk_ids int32 [R, topk]
        (the LOCAL index of the token's k-th expert when it is on this rank, else -1), recv_topk_weights fp32
        [R, topk]), R = the layout's recv_rows; rows ordered by source rank, then the source's token order
        (capacity mode: the slab of source s starts at row s * capacity). out=: a tuple of four such arrays
        (recv_scales None without scales; recv_topk_weights None: not written) with at least R rows."""

        def prep():
            if out is not None:
                if not isinstance(out, (tuple, list)) or len(out) != 4:
                    raise InvalidArgument("out= of dispatch must be a tuple of 4 arrays "
                                          "(recv_hidden, recv_scales, recv_topk_ids, recv_topk_weights)")
                return tuple(out), self._stream(hidden, stream)
            cfg = self._cfg
            rows = 0 if self._counts is None else self._counts.recv_rows
            spt = cfg.scales_per_token
            bufs = (_empty(hidden, (rows, cfg.hidden), cfg.dispatch_dtype),
                    _empty(hidden, (rows, spt), "float32") if spt > 0 else None,
                    _empty(hidden, (rows, cfg.topk), "int32"),
                    _empty(hidden, (rows, cfg.topk), "float32"))
            return bufs, self._stream(hidden, stream)

        bufs, s = self._prepare("dispatch", prep)
        a = self._arg
        self._h.dispatch(a(hidden), a(scales), a(topk_weights), *(a(b) for b in bufs),
                         -1 if self._tokens is None else self._tokens, s)
        return bufs

    def combine(self, expert_out, token_positions=None, topk_weights=None, scale=1.0, *, out=None, stream=None):
        """COLLECTIVE. Brings the expert outputs back and reduces them at each token's rank, bit-identical to a
        single-process run of the layer (moe_combine's arithmetic, in k order over all topk slots).

        expert_out (combine_dtype): one row per present local slot (recv_topk_ids >= 0). token_positions None:
        flat layout, row r * topk + k ([recv_rows * topk, hidden], or [recv_rows, topk, hidden]);
        token_positions int32 [recv_rows * topk] (or [recv_rows, topk]): row token_positions[r * topk + k], as
        align_block_size_ep writes it for recv_topk_ids (the permute + grouped GEMM layout). Other rows are
        never read. topk_weights: this rank's fp32 [num_tokens, topk] (None: 1). Returns [num_tokens, hidden] of
        combine_dtype (out=: such an array). A present slot with a negative position gets NaN in its token's
        output and the call then fails on every rank (after writing the output)."""

        def prep():
            sc = float(scale)
            if out is not None:
                return out, sc, self._stream(out, stream)
            like = next((x for x in (expert_out, topk_weights, token_positions) if x is not None), None)
            if like is None:
                import numpy

                like = numpy.empty(0, numpy.float32)
            rows = 0 if self._tokens is None else self._tokens
            o = _empty(like, (rows, self._cfg.hidden), self._cfg.combine_dtype)
            return o, sc, self._stream(like, stream)

        o, sc, s = self._prepare("combine", prep)
        a = self._arg
        self._h.combine(a(expert_out), a(token_positions), a(topk_weights), sc, a(o),
                        -1 if self._tokens is None else self._tokens,
                        -1 if self._counts is None else self._counts.recv_rows, s)
        return o

    def check_status(self, *, stream=None):
        """NCCL path: waits for the stream and raises what the device found (capacity mode). MPI: nothing to do
        (errors were raised at once). Not collective."""
        self._h.check_status(0 if stream is None else int(getattr(stream, "cuda_stream", getattr(stream, "ptr", stream))))

    def set_timing(self, on):
        """Benchmarking: with timing on, every phase boundary waits and the time of each phase is summed."""
        self._h.set_timing(bool(on))

    def phases(self):
        """dict: seconds in layout, pack, exchange, unpack, reduce (this rank), bytes_sent, bytes_received."""
        return self._h.phases()

    def reset_phases(self):
        self._h.reset_phases()

    def __repr__(self):
        return f"moe_routing.ep.Handle({self._cfg})"
