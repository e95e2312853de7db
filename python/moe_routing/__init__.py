"""moe_routing: Mixture-of-Experts token routing kernels on any DLPack array (NumPy, PyTorch, CuPy, JAX).

One build serves one backend (``backend_name()``): ``"cpu"`` takes host arrays, ``"cuda"`` / ``"hip"`` device
arrays on the current device. Every operation checks its arrays and raises :class:`Error` (see
``moe_routing._errors``) with a text naming the argument at fault. Outputs are returned in the input's framework
(or written into ``out=``); calls run on the framework's current stream (or ``stream=``) and never synchronise
with the host. ``moe_routing.torch`` registers the operations as PyTorch custom operators
(``torch.ops.moe_routing.*``) for ``torch.compile`` and CUDA graphs, and offers vLLM's ``moe_align_block_size``.
The semantics of each operation are those of the C API, documented in ``core/include/moe/routing.h``.
``moe_routing.ep`` moves tokens between ranks for expert parallelism (``core/include/moe/ep.h``).
"""

from ._errors import BackendError, Error, InvalidArgument, NotAvailable, Unsupported
from . import _ext
from ._api import (
    align_block_size,
    align_max_blocks,
    align_max_padded,
    align_workspace_size,
    available,
    backend_check,
    backend_name,
    clear_workspace_cache,
    moe_sum,
)
from ._api import *  # noqa: F401,F403  (the operations this build has: see _api.__all__)
from ._api import __all__ as _ops_all
from . import ep  # expert parallelism across ranks: moe_routing.ep.Comm.from_mpi, Handle (moe/ep.h)

__version__ = "0.1.0"

__all__ = [
    "Error",
    "InvalidArgument",
    "Unsupported",
    "BackendError",
    "NotAvailable",
] + list(_ops_all)
