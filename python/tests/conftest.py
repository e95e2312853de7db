"""Fixtures of the moe_routing test suite: the frameworks whose arrays this build's backend takes, each wrapped
in an adapter (make an array from NumPy, read one back), and skips for what this machine lacks.

CPU backend: NumPy always; PyTorch (CPU tensors) and JAX (CPU) when installed.
CUDA backend: PyTorch (CUDA tensors) and CuPy when installed, JAX (GPU) with CuPy; every test skips when no
GPU is visible (moe_routing.backend_check() fails)."""

import importlib

import numpy as np
import pytest

import moe_routing

BACKEND = moe_routing.backend_name()
HOST = moe_routing._ext.MEMORY == "host"


def _usable():
    try:
        moe_routing.backend_check()
        return True, ""
    except moe_routing.BackendError as e:
        return False, str(e)


USABLE, WHY = _usable()


def pytest_collection_modifyitems(config, items):
    if not USABLE:
        skip = pytest.mark.skip(reason=f"backend {BACKEND} cannot run here: {WHY}")
        for item in items:
            item.add_marker(skip)


def _try(name):
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - any import failure means "not here"
        return None


torch = _try("torch")
cupy = None if HOST else _try("cupy")
jax = _try("jax")
if jax is not None and not HOST and cupy is None:
    jax = None  # JAX on GPU needs CuPy for the outputs


class Adapter:
    """Arrays of one framework in this backend's memory space."""

    def __init__(self, name):
        self.name = name

    def asarray(self, a):
        a = np.ascontiguousarray(a)
        if self.name == "numpy":
            return a.copy()
        if self.name == "torch":
            t = torch.from_numpy(a.copy())
            return t if HOST else t.cuda()
        if self.name == "cupy":
            return cupy.asarray(a)
        if self.name == "jax":
            import jax.numpy as jnp

            if a.dtype.itemsize == 8 and jnp.zeros((), a.dtype).dtype.itemsize != 8:
                # jnp.asarray would narrow int64/float64 to 32 bits (ids past 2^31 wrap): not the array asked for
                pytest.skip("JAX narrows 64-bit types by default (jax_enable_x64 off)")

            dev = jax.devices("cpu" if HOST else "gpu")[0]
            return jax.device_put(jnp.asarray(a), dev)
        raise AssertionError(self.name)

    def numpy(self, x):
        if self.name == "torch":
            return x.detach().cpu().numpy()
        if self.name == "cupy":
            return cupy.asnumpy(x)
        return np.asarray(x)

    def empty(self, shape, dtype):
        return self.asarray(np.zeros(shape, dtype))

    def is_mine(self, x):
        mod = type(x).__module__.partition(".")[0]
        return {"jaxlib": "jax"}.get(mod, mod) == self.name

    def sync(self):
        if not HOST and self.name == "torch":
            torch.cuda.synchronize()
        if self.name == "cupy":
            cupy.cuda.get_current_stream().synchronize()


FRAMEWORKS = ["numpy"] if HOST else []
if torch is not None and (HOST or torch.cuda.is_available()):
    FRAMEWORKS.append("torch")
if cupy is not None:
    FRAMEWORKS.append("cupy")
if jax is not None:
    FRAMEWORKS.append("jax")


@pytest.fixture(params=FRAMEWORKS)
def xp(request):
    return Adapter(request.param)


@pytest.fixture
def np_or_torch():
    """The framework that can always make writable arrays here (NumPy on the CPU backend, else torch/CuPy)."""
    for name in ("numpy", "torch", "cupy"):
        if name in FRAMEWORKS:
            return Adapter(name)
    pytest.skip("no framework for this backend's memory")


def requires(op):
    return pytest.mark.skipif(not hasattr(moe_routing._ext, op),
                              reason=f"moe_{op} is not in this build's routing.h")


def bits(a):
    """The bit patterns of a float array (for bit-identical comparisons)."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
