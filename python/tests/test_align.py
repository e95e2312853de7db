"""align_block_size and its capacity / workspace queries, against the NumPy oracle, bit for bit."""

import numpy as np
import pytest

import moe_routing
import oracle

ID_TYPES = [np.int8, np.uint8, np.int16, np.int32, np.int64]


def random_ids(rng, numel, num_experts, dtype, invalid_share=0.1):
    info = np.iinfo(dtype)
    hi = min(num_experts, int(info.max) + 1)
    ids = rng.integers(0, hi, size=numel).astype(np.int64)
    bad = rng.random(numel) < invalid_share
    choices = [v for v in (-1, -7, num_experts, num_experts + 3, int(info.max), int(info.min))
               if info.min <= v <= info.max and not (0 <= v < num_experts)]
    if choices:
        ids[bad] = rng.choice(choices, size=int(bad.sum()))
    return ids.astype(dtype)


def check_align(xp, ids_np, num_experts, block_size, **kw):
    s, e, p = moe_routing.align_block_size(xp.asarray(ids_np), num_experts, block_size, **kw)
    for a in (s, e, p):
        assert xp.is_mine(a), type(a)
    rs, re, rp, _, _ = oracle.align(ids_np, num_experts, block_size)
    s, e, p = xp.numpy(s), xp.numpy(e), xp.numpy(p)
    assert s.dtype == np.int32 and e.dtype == np.int32 and p.dtype == np.int32
    assert s.shape == rs.shape and e.shape == re.shape and p.shape == (1,)
    np.testing.assert_array_equal(p, rp)
    np.testing.assert_array_equal(s, rs)
    np.testing.assert_array_equal(e, re)


def test_golden_example_of_routing_h(xp):
    ids = np.array([0, 1, 2, 1, 2, 3, 0, 3, 4], np.int32)
    s, e, p = moe_routing.align_block_size(xp.asarray(ids), 5, 4)
    S = 9
    np.testing.assert_array_equal(
        xp.numpy(s), [0, 6, S, S, 1, 3, S, S, 2, 4, S, S, 5, 7, S, S, 8, S, S, S, S, S, S, S])
    np.testing.assert_array_equal(xp.numpy(e), [0, 1, 2, 3, 4, -1])
    np.testing.assert_array_equal(xp.numpy(p), [20])


def test_vllm_docstring_example(xp):
    # vLLM's docstring example (experts 1..4 of 5, block 4): groups ascend inside, padding with 12.
    ids = np.array([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], np.int32)
    s, e, p = moe_routing.align_block_size(xp.asarray(ids), 5, 4)
    assert int(xp.numpy(p)[0]) == 16
    np.testing.assert_array_equal(xp.numpy(s)[:16], [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12])
    np.testing.assert_array_equal(xp.numpy(e)[:4], [1, 2, 3, 4])


@pytest.mark.parametrize("dtype", ID_TYPES)
@pytest.mark.parametrize("numel,num_experts,block_size", [
    (0, 8, 16), (1, 1, 1), (1, 256, 64), (8, 256, 16), (37, 3, 5), (1000, 64, 16), (4096, 256, 64),
    (5000, 1024, 128), (20000, 8, 256), (3000, 65536, 1), (2500, 300, 7)])
def test_random_against_oracle(xp, dtype, numel, num_experts, block_size):
    rng = np.random.default_rng(numel * 7919 + num_experts + block_size)
    check_align(xp, random_ids(rng, numel, num_experts, dtype), num_experts, block_size)


def test_shapes_2d_and_3d_are_flattened(xp):
    rng = np.random.default_rng(3)
    ids = random_ids(rng, 6 * 4 * 2, 10, np.int32).reshape(6, 4, 2)
    check_align(xp, ids, 10, 4)


def test_adversarial(xp):
    rng = np.random.default_rng(11)
    check_align(xp, np.full(777, -1, np.int32), 16, 8)  # all dropped
    check_align(xp, np.full(777, 5, np.int64), 16, 8)  # one expert
    check_align(xp, np.arange(1000, dtype=np.int32) % 7, 7, 1)  # block 1: no padding
    check_align(xp, rng.integers(0, 2, 3000).astype(np.int16) * 1023, 1024, 32)  # two far experts
    check_align(xp, np.arange(300, dtype=np.int32)[::-1].copy(), 300, 300)  # big blocks


def test_out_arrays_are_written_in_place(np_or_torch):
    xp = np_or_torch
    ids = np.array([3, 1, 3, 0, -1, 2], np.int32)
    cap, blocks = moe_routing.align_max_padded(6, 4, 4), moe_routing.align_max_blocks(6, 4, 4)
    s, e, p = xp.empty((cap + 5,), np.int32), xp.empty((blocks + 2,), np.int32), xp.empty((3,), np.int32)
    got = moe_routing.align_block_size(xp.asarray(ids), 4, 4, out=(s, e, p))
    assert got[0] is s and got[1] is e and got[2] is p
    rs, re, rp, _, _ = oracle.align(ids, 4, 4)
    np.testing.assert_array_equal(xp.numpy(s)[:cap], rs)
    np.testing.assert_array_equal(xp.numpy(s)[cap:], 0)  # past the capacity: untouched
    np.testing.assert_array_equal(xp.numpy(e)[:blocks], re)
    np.testing.assert_array_equal(xp.numpy(e)[blocks:], 0)
    np.testing.assert_array_equal(xp.numpy(p), [rp[0], 0, 0])


def test_capacities_and_workspace():
    assert moe_routing.align_max_padded(9, 5, 4) == 24
    assert moe_routing.align_max_blocks(9, 5, 4) == 6
    assert moe_routing.align_max_padded(8, 256, 16) == 8 + 8 * 15
    assert moe_routing.align_max_padded(0, 5, 4) == 0
    assert moe_routing.align_workspace_size(4096, 256, 64) >= 0
    with pytest.raises(moe_routing.InvalidArgument, match="block_size"):
        moe_routing.align_max_padded(9, 5, 0)
    with pytest.raises(moe_routing.InvalidArgument, match="num_experts"):
        moe_routing.align_max_blocks(9, 65537, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="numel"):
        moe_routing.align_workspace_size(-1, 5, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="INT32_MAX"):
        moe_routing.align_max_padded(2**30, 65536, 2**20)


def test_workspace_is_cached_per_shape(xp):
    from moe_routing import _frameworks

    import sys
    ids = xp.asarray(np.arange(4096, dtype=np.int32) % 256)
    if moe_routing.align_workspace_size(4096, 256, 64) == 0:
        pytest.skip("this backend needs no workspace for the shape")
    if xp.name == "torch":  # the Python path's dict and the C++ operators' map (csrc/torch_ops.cpp)
        size = sys.modules["moe_routing.torch"]._workspace_cache_size
        cache = None
    else:
        cache = _frameworks._workspaces
        size = lambda: len(cache)  # noqa: E731
    moe_routing.align_block_size(ids, 256, 64)
    before = dict(cache) if cache is not None else {}
    count = size()
    assert count >= 1
    for _ in range(3):
        moe_routing.align_block_size(ids, 256, 64)
    assert size() == count and all(cache[k] is before[k] for k in before)
    moe_routing.align_block_size(ids, 256, 32)  # another shape: another buffer
    assert size() == count + 1
    moe_routing.clear_workspace_cache()
    assert size() == 0
