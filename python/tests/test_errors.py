"""Every error path of the Python API: the exception class, and a text naming the argument at fault."""

import numpy as np
import pytest

import moe_routing
from conftest import HOST, torch


def test_exception_hierarchy():
    E = moe_routing
    assert issubclass(E.Error, RuntimeError)
    assert issubclass(E.InvalidArgument, E.Error) and issubclass(E.InvalidArgument, ValueError)
    assert issubclass(E.Unsupported, E.Error) and issubclass(E.Unsupported, TypeError)
    assert issubclass(E.BackendError, E.Error)
    assert issubclass(E.NotAvailable, E.Error) and issubclass(E.NotAvailable, NotImplementedError)
    assert (E.InvalidArgument.status, E.Unsupported.status, E.BackendError.status) == (1, 2, 3)


def test_backend_name():
    assert moe_routing.backend_name() in ("cpu", "cuda", "hip", "kokkos")
    assert moe_routing.backend_name() == moe_routing._ext.backend_name()


def ids_of(xp, n=12, dtype=np.int32):
    return xp.asarray((np.arange(n) % 5).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint16, np.uint32, np.uint64, np.bool_])
def test_align_rejects_non_id_dtypes(xp, dtype):
    with pytest.raises(moe_routing.Unsupported, match="topk_ids must have an integer dtype"):
        moe_routing.align_block_size(ids_of(xp, dtype=dtype), 5, 4)


def test_align_rejects_bad_sizes(xp):
    ids = ids_of(xp)
    with pytest.raises(moe_routing.InvalidArgument, match="num_experts"):
        moe_routing.align_block_size(ids, 0, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="num_experts"):
        moe_routing.align_block_size(ids, 65537, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="block_size"):
        moe_routing.align_block_size(ids, 5, 0)
    with pytest.raises(moe_routing.InvalidArgument, match="INT32_MAX"):
        moe_routing.align_block_size(ids, 5, 2**30)


def test_align_rejects_non_contiguous(np_or_torch):
    xp = np_or_torch
    ids = xp.asarray((np.arange(24) % 5).astype(np.int32).reshape(4, 6))
    with pytest.raises(moe_routing.InvalidArgument, match="topk_ids must be (C-)?contiguous"):
        moe_routing.align_block_size(ids[:, ::2], 5, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="topk_ids must be (C-)?contiguous"):
        moe_routing.align_block_size(ids.T, 5, 4)


def test_align_rejects_bad_outputs(np_or_torch):
    xp = np_or_torch
    ids = ids_of(xp)
    cap, blocks = moe_routing.align_max_padded(12, 5, 4), moe_routing.align_max_blocks(12, 5, 4)
    good = lambda: [xp.empty((cap,), np.int32), xp.empty((blocks,), np.int32), xp.empty((1,), np.int32)]  # noqa

    def expect(i, bad, match):
        out = good()
        out[i] = bad
        with pytest.raises(moe_routing.InvalidArgument, match=match):
            moe_routing.align_block_size(ids, 5, 4, out=tuple(out))

    expect(0, xp.empty((cap - 1,), np.int32), "sorted_token_ids has .* fewer than")
    expect(1, xp.empty((blocks - 1,), np.int32), "expert_ids has .* fewer than")
    expect(2, xp.empty((0,), np.int32), "num_tokens_post_pad has 0 elements")
    expect(0, xp.empty((cap,), np.int64), "sorted_token_ids must be (int32|torch.int32)")
    expect(1, xp.empty((blocks,), np.uint32), "expert_ids must be (int32|torch.int32)")
    expect(0, xp.empty((2 * cap,), np.int32)[::2], "sorted_token_ids must be (C-)?contiguous")
    with pytest.raises(moe_routing.InvalidArgument, match="tuple of 3"):
        moe_routing.align_block_size(ids, 5, 4, out=good()[:2])


def test_numpy_read_only_output_is_rejected():
    if not HOST:
        pytest.skip("host arrays only on the CPU backend")
    out = [np.empty(moe_routing.align_max_padded(12, 5, 4), np.int32), np.empty(6, np.int32), np.empty(1, np.int32)]
    out[0].flags.writeable = False
    with pytest.raises(moe_routing.InvalidArgument, match="sorted_token_ids must be a writable array"):
        moe_routing.align_block_size(np.arange(12, dtype=np.int32) % 5, 5, 4, out=tuple(out))


def test_not_an_array():
    with pytest.raises(moe_routing.InvalidArgument, match="topk_ids must be an array"):
        moe_routing.align_block_size([1, 2, 3], 5, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="x must be an array"):
        moe_routing.moe_sum("text")


def test_wrong_memory_space():
    """Host arrays on a GPU build, and device (here: PyTorch 'meta') tensors on the CPU build."""
    if HOST:
        if torch is None:
            pytest.skip("needs PyTorch for a non-host tensor")
        ids = torch.zeros(8, dtype=torch.int32, device="meta")
        with pytest.raises(moe_routing.InvalidArgument, match="topk_ids must be a CPU tensor"):
            moe_routing.align_block_size(ids, 5, 4)
        with pytest.raises(moe_routing.InvalidArgument, match="x must be a CPU tensor"):
            moe_routing.moe_sum(torch.zeros(2, 2, 2, device="meta"))
    else:
        with pytest.raises(moe_routing.InvalidArgument, match="topk_ids must be a CUDA device array"):
            moe_routing.align_block_size(np.zeros(8, np.int32), 5, 4)
        with pytest.raises(moe_routing.InvalidArgument, match="x must be a CUDA device array"):
            moe_routing.moe_sum(np.zeros((2, 2, 2), np.float32))


def test_output_on_the_wrong_device():
    if HOST or torch is None:
        pytest.skip("needs a CUDA build and PyTorch")
    ids = torch.zeros(8, dtype=torch.int32, device="cuda")
    out = (torch.empty(64, dtype=torch.int32), torch.empty(16, dtype=torch.int32, device="cuda"),
           torch.empty(1, dtype=torch.int32, device="cuda"))
    with pytest.raises(moe_routing.InvalidArgument, match="sorted_token_ids must be a CUDA tensor"):
        moe_routing.align_block_size(ids, 5, 4, out=out)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.float64])
def test_sum_rejects_non_float_dtypes(xp, dtype):
    with pytest.raises(moe_routing.Unsupported, match="x must be float32, float16 or bfloat16"):
        moe_routing.moe_sum(xp.asarray(np.zeros((2, 3, 4), dtype)))


def test_sum_rejects_bad_shapes_and_outputs(np_or_torch):
    xp = np_or_torch
    x = xp.asarray(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(moe_routing.InvalidArgument, match=r"x must have shape \(num_tokens, topk, hidden\)"):
        moe_routing.moe_sum(xp.asarray(np.zeros((6, 4), np.float32)))
    with pytest.raises(moe_routing.InvalidArgument, match=r"out must have shape \(2, 4\)"):
        moe_routing.moe_sum(x, out=xp.empty((2, 3), np.float32))
    with pytest.raises(moe_routing.InvalidArgument, match="out must be .*float32"):
        moe_routing.moe_sum(x, out=xp.empty((2, 4), np.float16))
    with pytest.raises(moe_routing.InvalidArgument, match="out must be (C-)?contiguous"):
        moe_routing.moe_sum(x, out=xp.empty((4, 2), np.float32).T)
    with pytest.raises(moe_routing.InvalidArgument, match="x must be (C-)?contiguous"):
        moe_routing.moe_sum(xp.asarray(np.zeros((2, 4, 3), np.float32)).transpose(0, 2, 1)
                            if xp.name == "numpy" else xp.asarray(np.zeros((2, 4, 3), np.float32)).permute(0, 2, 1))
    with pytest.raises(moe_routing.InvalidArgument, match="topk must be >= 1"):
        moe_routing.moe_sum(xp.asarray(np.zeros((2, 0, 4), np.float32)))


def test_sum_rejects_overlapping_output(np_or_torch):
    xp = np_or_torch
    x = xp.asarray(np.ones((4, 1, 8), np.float32))
    with pytest.raises(moe_routing.InvalidArgument, match="overlaps"):
        moe_routing.moe_sum(x, out=x.reshape(4, 8))


def test_error_text_is_the_librarys():
    with pytest.raises(moe_routing.InvalidArgument) as info:
        moe_routing.align_max_padded(5, 3, -2)
    assert str(info.value) == "block_size must be >= 1, got -2"


@pytest.mark.parametrize("op", ["align_block_size_ep", "permute", "combine", "topk_gating", "route"])
def test_missing_operations_raise_not_available(op):
    if moe_routing.available(op):
        pytest.skip(f"{op} is in this build")
    fn = getattr(moe_routing, op)
    with pytest.raises(moe_routing.NotAvailable, match="not in this build"):
        if op == "align_block_size_ep":
            fn(np.zeros(4, np.int32), 4, 4)
        elif op == "permute":
            fn(np.zeros((2, 4), np.float32), np.zeros(8, np.int32), np.zeros(1, np.int32), 2)
        elif op == "combine":
            fn(np.zeros((4, 4), np.float32), topk=2)
        elif op == "topk_gating":
            fn(np.zeros((2, 8), np.float32), 2)
        else:
            fn(np.zeros((2, 8), np.float32), 2, 4)
