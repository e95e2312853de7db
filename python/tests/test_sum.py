"""moe_sum against the NumPy oracle, bit for bit (fp32 and fp16 from every framework, bf16 from PyTorch)."""

import numpy as np
import pytest

import moe_routing
import oracle
from conftest import bits, torch

SHAPES = [(0, 2, 8), (1, 1, 1), (3, 2, 5), (17, 8, 64), (64, 3, 1000), (5, 32, 7), (2, 4, 0)]


def special(rng, shape):
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, size=shape)).astype(np.float32)
    flat = x.reshape(-1)
    if flat.size >= 8:
        flat[:: max(1, flat.size // 5)] = np.float32(3.0e38)  # overflow to inf and inf - inf = NaN
        flat[1] = np.nan
        flat[2] = -np.inf
        flat[3] = 1e-40  # subnormal
        flat[4] = -0.0
    return x


@pytest.mark.filterwarnings("ignore:overflow")
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_against_oracle(xp, shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x = special(rng, shape).astype(dtype)
    out = moe_routing.moe_sum(xp.asarray(x))
    assert xp.is_mine(out)
    got = xp.numpy(out)
    assert got.shape == (shape[0], shape[2]) and got.dtype == x.dtype
    np.testing.assert_array_equal(bits(got), oracle.moe_sum(x, dtype))


@pytest.mark.skipif(torch is None, reason="bfloat16 arrays come from PyTorch")
@pytest.mark.parametrize("shape", SHAPES)
def test_bfloat16_against_oracle(shape):
    import moe_routing.torch as mt
    from conftest import Adapter

    rng = np.random.default_rng(sum(shape) + 1)
    x32 = special(rng, shape)
    xb = oracle.f32_to_bf16(x32)  # bits
    t = Adapter("torch").asarray(xb.view(np.int16)).view(torch.bfloat16)
    out = mt.moe_sum(t)
    got = out.view(torch.int16).cpu().numpy().view(np.uint16)
    np.testing.assert_array_equal(got, oracle.moe_sum(xb, "bfloat16"))


def test_out_in_place(np_or_torch):
    xp = np_or_torch
    x = np.random.default_rng(0).standard_normal((4, 3, 6)).astype(np.float32)
    out = xp.empty((4, 6), np.float32)
    got = moe_routing.moe_sum(xp.asarray(x), out=out)
    assert got is out
    np.testing.assert_array_equal(bits(xp.numpy(out)), oracle.moe_sum(x, "float32"))


def test_nan_is_canonical(np_or_torch):
    xp = np_or_torch
    x = np.zeros((1, 2, 3), np.float32)
    x.view(np.uint32)[0, 0, :] = [0x7FC00001, 0xFFC00000, 0x7F800001]  # payloads and signs
    got = bits(xp.numpy(moe_routing.moe_sum(xp.asarray(x))))
    np.testing.assert_array_equal(got, [[0x7FC00000] * 3])
