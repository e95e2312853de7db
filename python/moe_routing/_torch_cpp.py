"""The C++ operators of moe_routing.torch (csrc/torch_ops.cpp): compiled against the torch in use with
torch.utils.cpp_extension at the first import of moe_routing.torch (C++ only: a host compiler and ninja, no
CUDA toolkit), cached under torch's extensions directory (TORCH_EXTENSIONS_DIR) by torch version, api_table.h and source
hash, then bound to this build of the library through moe_routing._ext.torch_api_table().

MOE_ROUTING_TORCH_CPP: "auto" (default) uses them when they build, else the Python-registered operators with one
warning; "0" never builds them; "1" requires them (an error if they do not build).
"""

import hashlib
import os
import re
import warnings

import torch

from . import _ext

_CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")


def _mode():
    mode = os.environ.get("MOE_ROUTING_TORCH_CPP", "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        raise ValueError(f"MOE_ROUTING_TORCH_CPP must be auto, 0 or 1, got {mode!r}")
    return mode


def load():
    """True when torch.ops.moe_routing.align_block_size and moe_sum are the C++ operators, bound."""
    mode = _mode()
    if mode == "0":
        return False
    try:
        from torch.utils.cpp_extension import load as build_and_load

        # the torch version and api_table.h's hash in the name: a build for another torch or another table is
        # never picked up from the cache (torch hashes the sources, not the included header; once loaded, a
        # stale build's schemas could not be replaced by the Python operators)
        with open(os.path.join(_CSRC, "api_table.h"), "rb") as f:
            table = hashlib.sha1(f.read()).hexdigest()[:10]
        name = f"moe_routing_torch_ops_{re.sub(r'[^0-9A-Za-z]', '_', torch.__version__)}_{table}"
        build_and_load(name=name, sources=[os.path.join(_CSRC, "torch_ops.cpp")], extra_include_paths=[_CSRC],
                       extra_cflags=["-O2"], is_python_module=False, verbose=False)
        if not torch.ops.moe_routing._bind(_ext.torch_api_table()):
            raise RuntimeError("the cached build of csrc/torch_ops.cpp expects another api_table.h version")
        return True
    except Exception as e:  # no compiler, no ninja, a torch without headers: the Python operators serve
        if mode == "1":
            raise
        warnings.warn(f"moe_routing.torch: C++ operators not built ({type(e).__name__}: {str(e)[:300]}); "
                      "using the Python-registered ones (higher call overhead). MOE_ROUTING_TORCH_CPP=0 "
                      "silences this.", RuntimeWarning, stacklevel=3)
        return False
