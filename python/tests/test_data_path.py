"""The data path of issue 27 (align_block_size_ep, permute, combine) from every framework, against the NumPy
oracle; skipped where this build's routing.h does not declare the operation yet."""

import numpy as np
import pytest

import moe_routing
import oracle
from conftest import HOST, bits, requires, torch

ID_TYPES = [np.int8, np.uint8, np.int16, np.int32, np.int64]


def ep_case(rng, numel, num_experts, num_local, dtype=np.int32):
    ids = rng.integers(-1, num_experts + 2, size=numel)
    info = np.iinfo(dtype)
    ids = np.clip(ids, info.min, info.max).astype(dtype)
    emap = np.full(num_experts, -1, np.int32)
    owned = rng.choice(num_experts, size=min(num_local, num_experts), replace=False)
    emap[owned] = rng.integers(0, num_local, size=owned.size)  # many-to-one allowed
    emap[rng.integers(0, num_experts)] = num_local + 3  # out of range: dropped
    return ids, emap


@requires("align_block_size_ep")
@pytest.mark.parametrize("dtype", ID_TYPES)
@pytest.mark.parametrize("numel,num_experts,num_local,block_size", [
    (0, 8, 4, 16), (1, 4, 2, 4), (64, 16, 8, 4), (3000, 256, 32, 64), (777, 100, 100, 1), (5000, 64, 3, 128)])
def test_align_ep_against_oracle(xp, dtype, numel, num_experts, num_local, block_size):
    rng = np.random.default_rng(numel + num_local)
    ids, emap = ep_case(rng, numel, num_experts, num_local, dtype)
    got = moe_routing.align_block_size_ep(xp.asarray(ids), num_experts, block_size, xp.asarray(emap), num_local,
                                          with_counts=True, with_positions=True)
    want = oracle.align(ids, num_experts, block_size, expert_map=emap, num_local=num_local)
    for g, w, name in zip(got, want, ("sorted", "experts", "post", "counts", "positions")):
        assert xp.is_mine(g), name
        np.testing.assert_array_equal(xp.numpy(g).reshape(-1), w, err_msg=name)


@requires("align_block_size_ep")
def test_align_ep_identity_map_equals_align(xp):
    rng = np.random.default_rng(5)
    ids = rng.integers(-2, 40, size=999).astype(np.int32)
    s, e, p, c, t = moe_routing.align_block_size_ep(xp.asarray(ids), 37, 8)
    assert c is None and t is None
    for a, b in zip((s, e, p), moe_routing.align_block_size(xp.asarray(ids), 37, 8)):
        np.testing.assert_array_equal(xp.numpy(a), xp.numpy(b))


@requires("align_block_size_ep")
def test_align_ep_errors(np_or_torch):
    xp = np_or_torch
    ids = xp.asarray(np.zeros(8, np.int32))
    with pytest.raises(moe_routing.InvalidArgument, match="num_local_experts is required"):
        moe_routing.align_block_size_ep(ids, 4, 4, xp.asarray(np.zeros(4, np.int32)))
    with pytest.raises(moe_routing.InvalidArgument, match="expert_map must"):
        moe_routing.align_block_size_ep(ids, 4, 4, xp.asarray(np.zeros(5, np.int32)), 2)
    with pytest.raises(moe_routing.InvalidArgument, match="expert_map must be (int32|torch.int32)"):
        moe_routing.align_block_size_ep(ids, 4, 4, xp.asarray(np.zeros(4, np.int64)), 2)
    with pytest.raises(moe_routing.Unsupported, match="topk_ids must have an integer dtype"):
        moe_routing.align_block_size_ep(xp.asarray(np.zeros(8, np.float32)), 4, 4)
    cap, blocks = moe_routing.align_max_padded(8, 2, 4), moe_routing.align_max_blocks(8, 2, 4)
    out = [xp.empty((cap,), np.int32), xp.empty((blocks,), np.int32), xp.empty((1,), np.int32),
           xp.empty((1,), np.int32), None]
    with pytest.raises(moe_routing.InvalidArgument, match="expert_counts has 1 elements"):
        moe_routing.align_block_size_ep(ids, 4, 4, xp.asarray(np.zeros(4, np.int32)), 2, out=tuple(out))
    out[3], out[4] = None, xp.empty((7,), np.int32)
    with pytest.raises(moe_routing.InvalidArgument, match="token_positions has 7 elements"):
        moe_routing.align_block_size_ep(ids, 4, 4, xp.asarray(np.zeros(4, np.int32)), 2, out=tuple(out))


PERMUTE_DTYPES = ["float32", "float16", "int8", "uint8", "int64", "float64"]


@requires("permute")
@pytest.mark.parametrize("dtype", PERMUTE_DTYPES)
@pytest.mark.parametrize("num_tokens,topk,hidden,num_experts,block_size", [
    (1, 1, 8, 4, 4), (13, 2, 64, 8, 4), (200, 8, 48, 64, 16), (5, 3, 1, 300, 8)])
def test_permute_against_oracle(xp, dtype, num_tokens, topk, hidden, num_experts, block_size):
    rng = np.random.default_rng(num_tokens * hidden)
    h = (rng.standard_normal((num_tokens, hidden)) * 50).astype(dtype)
    ids = rng.integers(-1, num_experts, size=(num_tokens, topk)).astype(np.int32)
    s, e, p = moe_routing.align_block_size(xp.asarray(ids), num_experts, block_size)
    got = moe_routing.permute(xp.asarray(h), s, p, topk)
    assert xp.is_mine(got)
    rs, _, rp, _, _ = oracle.align(ids, num_experts, block_size)
    g = xp.numpy(got)
    assert g.shape == (rs.size, hidden) and g.dtype == h.dtype
    want = oracle.permute(h, rs, rp[0], topk)
    np.testing.assert_array_equal(g[: rp[0]].view(np.uint8), want.view(np.uint8))


@requires("permute")
def test_permute_float8_from_torch():
    if torch is None or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("needs PyTorch with float8")
    import moe_routing.torch as mt

    dev = "cpu" if HOST else "cuda"
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        h = torch.randn(16, 32, device=dev).to(dt)
        ids = torch.randint(0, 8, (16, 2), dtype=torch.int32, device=dev)
        s, e, p = mt.align_block_size(ids, 8, 4)
        out = mt.permute(h, s, p, 2)
        n = int(p.item())
        sv = s[:n].long()
        rows = torch.where((sv < 32).unsqueeze(1), h.view(torch.uint8)[(sv // 2).clamp(max=15)],
                           torch.zeros(1, dtype=torch.uint8, device=dev))
        assert torch.equal(out.view(torch.uint8)[:n], rows)


@requires("permute")
def test_permute_errors(np_or_torch):
    xp = np_or_torch
    h = xp.asarray(np.zeros((4, 8), np.float32))
    s, e, p = moe_routing.align_block_size(xp.asarray(np.zeros(8, np.int32)), 4, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="hidden must have shape"):
        moe_routing.permute(xp.asarray(np.zeros(8, np.float32)), s, p, 2)
    with pytest.raises(moe_routing.InvalidArgument, match="out must have shape"):
        moe_routing.permute(h, s, p, 2, out=xp.empty((3, 8), np.float32))
    with pytest.raises(moe_routing.InvalidArgument, match="out must"):
        moe_routing.permute(h, s, p, 2, out=xp.empty((64, 8), np.float16))
    with pytest.raises(moe_routing.InvalidArgument, match="sorted_token_ids must be (int32|torch.int32)"):
        moe_routing.permute(h, xp.asarray(np.zeros(20, np.int64)), p, 2)
    with pytest.raises(moe_routing.InvalidArgument, match="hidden must be (C-)?contiguous"):
        moe_routing.permute(xp.asarray(np.zeros((8, 4), np.float32)).T, s, p, 2)


@requires("combine")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["flat", "permuted"])
@pytest.mark.parametrize("weights,scale", [(False, 1.0), (True, 1.0), (True, 0.37)])
def test_combine_against_oracle(xp, dtype, layout, weights, scale):
    if layout == "permuted" and not moe_routing.available("align_block_size_ep"):
        pytest.skip("token positions come from align_block_size_ep")
    rng = np.random.default_rng(7)
    T, K, H, E = 37, 4, 24, 16
    ids = rng.integers(-1, E, size=(T, K)).astype(np.int32)
    ids[3] = -1  # a token with no present slot: zeros
    w = rng.random((T, K)).astype(np.float32) if weights else None
    _, _, _, _, pos = oracle.align(ids, E, 4)
    if layout == "flat":
        rows = rng.standard_normal((T * K, H)).astype(dtype)
        rows[pos < 0] = np.nan  # absent rows must never be read
        got = moe_routing.combine(xp.asarray(rows), None if w is None else xp.asarray(w),
                                  xp.asarray(pos.reshape(T, K)), topk=K, scale=scale)
    else:
        s, e, p, c, t = moe_routing.align_block_size_ep(xp.asarray(ids), E, 4, with_positions=True)
        rows = rng.standard_normal((xp.numpy(s).size, H)).astype(dtype)
        live = xp.numpy(s) < T * K
        rows[~live] = np.nan
        got = moe_routing.combine(xp.asarray(rows), None if w is None else xp.asarray(w), t, layout="permuted",
                                  scale=scale)
        pos = xp.numpy(t)
    assert xp.is_mine(got)
    want = oracle.combine(rows, dtype, T, K, positions=pos, weights=w, scale=scale, layout=layout)
    np.testing.assert_array_equal(bits(xp.numpy(got)), want)


@requires("combine")
def test_combine_flat_equals_moe_sum(xp):
    x = np.random.default_rng(8).standard_normal((9, 3, 40)).astype(np.float32)
    a = xp.numpy(moe_routing.combine(xp.asarray(x)))
    b = xp.numpy(moe_routing.moe_sum(xp.asarray(x)))
    np.testing.assert_array_equal(bits(a), bits(b))


@requires("combine")
def test_combine_errors(np_or_torch):
    xp = np_or_torch
    rows = xp.asarray(np.zeros((8, 4), np.float32))
    with pytest.raises(moe_routing.InvalidArgument, match="topk is needed"):
        moe_routing.combine(rows)
    with pytest.raises(moe_routing.InvalidArgument, match="layout must be"):
        moe_routing.combine(rows, topk=2, layout="grouped")
    with pytest.raises(moe_routing.InvalidArgument, match="needs token_positions"):
        moe_routing.combine(rows, topk=2, layout="permuted")
    with pytest.raises(moe_routing.InvalidArgument, match="topk_weights must"):
        moe_routing.combine(rows, xp.asarray(np.zeros((4, 2), np.float16)))
    with pytest.raises(moe_routing.InvalidArgument, match="rows must have num_tokens \\* topk"):
        moe_routing.combine(xp.asarray(np.zeros((7, 4), np.float32)), topk=2)
    with pytest.raises(moe_routing.InvalidArgument, match="topk_weights must have num_tokens \\* topk = 8"):
        moe_routing.combine(rows, xp.asarray(np.zeros((3, 2), np.float32)))
    with pytest.raises(moe_routing.Unsupported, match="rows must be float32"):
        moe_routing.combine(xp.asarray(np.zeros((8, 4), np.int32)), topk=2)
    with pytest.raises(moe_routing.InvalidArgument, match="out must have shape"):
        moe_routing.combine(rows, topk=2, out=xp.empty((3, 4), np.float32))
