"""moe_routing.torch: the custom operators (schema, fake implementations, opcheck), torch.compile(fullgraph=True),
CUDA graph capture and streams (CUDA builds), no host synchronisation, and vLLM's moe_align_block_size."""

import numpy as np
import pytest

import moe_routing
import oracle
from conftest import HOST, torch

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
if torch is not None:
    import moe_routing.torch as mt

DEV = "cpu" if HOST else "cuda"
GPU = not HOST


def ids_tensor(numel, num_experts, seed=0, dtype=None):
    rng = np.random.default_rng(seed)
    ids = rng.integers(-1, num_experts + 1, size=numel).astype(np.int32)
    t = torch.from_numpy(ids).to(DEV)
    return t if dtype is None else t.to(dtype)


def check_align(ids, num_experts, block_size, got):
    rs, re, rp, _, _ = oracle.align(ids.cpu().numpy(), num_experts, block_size)
    s, e, p = (a.cpu().numpy() for a in got)
    np.testing.assert_array_equal(p, rp)
    np.testing.assert_array_equal(s, rs)
    np.testing.assert_array_equal(e, re)


def test_ops_are_registered():
    for name in ("align_block_size", "align_block_size_out", "moe_sum", "moe_sum_out"):
        assert hasattr(torch.ops.moe_routing, name)


def _can_build_cpp():
    import shutil
    return shutil.which("ninja") is not None and (shutil.which("c++") or shutil.which("g++")) is not None


def test_cpp_operators_are_used():
    """Where a compiler and ninja exist, align_block_size and moe_sum are the C++ operators (csrc/torch_ops.cpp),
    unless MOE_ROUTING_TORCH_CPP=0 asked for the Python ones: a silent fallback would hide their overhead."""
    import os
    mode = os.environ.get("MOE_ROUTING_TORCH_CPP", "auto")
    if mode == "0" or not _can_build_cpp():
        assert not mt._CPP or mode != "0"
        pytest.skip("the C++ operators are off here (MOE_ROUTING_TORCH_CPP=0 or no compiler)")
    assert mt._CPP
    # a C++ operator has no Python kernel: torch.library's custom_op objects are not in play
    assert isinstance(mt._align_op, torch._ops.OpOverload) and isinstance(mt._sum_op, torch._ops.OpOverload)


def test_cpp_operator_errors_are_runtime_errors():
    """Through torch.ops a C++ operator's failure is torch's RuntimeError with the library's text (the _out forms,
    Python-registered, raise moe_routing's classes, RuntimeErrors too); the moe_routing.torch functions re-run a
    failed call on the Python path, which raises moe_routing's classes."""
    if not mt._CPP:
        pytest.skip("the C++ operators are not built here")
    ids = ids_tensor(8, 4)
    with pytest.raises(RuntimeError, match="block_size"):
        torch.ops.moe_routing.align_block_size(ids, 4, 0)
    with pytest.raises(RuntimeError, match="integer dtype"):
        torch.ops.moe_routing.align_block_size(ids.float(), 4, 4)
    with pytest.raises(RuntimeError, match="sorted_token_ids has 3 elements"):
        torch.ops.moe_routing.align_block_size_out(ids, 4, 4, torch.empty(3, dtype=torch.int32, device=DEV),
                                                   torch.empty(64, dtype=torch.int32, device=DEV),
                                                   torch.empty(1, dtype=torch.int32, device=DEV))
    with pytest.raises(RuntimeError, match="does not fit int32"):
        torch.ops.moe_routing.align_block_size(ids, 2**31, 4)
    with pytest.raises(RuntimeError, match="x must have shape"):
        torch.ops.moe_routing.moe_sum(torch.zeros(3, 4, device=DEV))
    with pytest.raises(RuntimeError, match="contiguous"):
        torch.ops.moe_routing.moe_sum(torch.zeros(3, 4, 2, device=DEV).transpose(0, 1))
    with pytest.raises(moe_routing.InvalidArgument, match="block_size"):
        mt.align_block_size(ids, 4, 0)


def test_python_operators_when_cpp_is_off():
    """MOE_ROUTING_TORCH_CPP=0: the Python-registered operators, in a fresh interpreter, give the same results."""
    import os
    import subprocess
    import sys
    code = (
        "import torch, numpy as np, moe_routing, moe_routing.torch as mt\n"
        "assert not mt._CPP\n"
        f"dev = {DEV!r}\n"
        "ids = torch.from_numpy(np.random.default_rng(3).integers(-1, 40, 777).astype(np.int32)).to(dev)\n"
        "a = mt.align_block_size(ids, 39, 8)\n"
        "b = moe_routing.align_block_size(ids.cpu().numpy(), 39, 8) if dev == 'cpu' else a\n"
        "c = torch.ops.moe_routing.align_block_size(ids, 39, 8)\n"
        "as_np = lambda y: y.cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)\n"
        "assert all(np.array_equal(x.cpu().numpy(), as_np(y)) for x, y in zip(a, b))\n"
        "assert all(torch.equal(x, y) for x, y in zip(a, c))\n"
        "x = torch.randn(5, 3, 7, device=dev)\n"
        "assert torch.equal(mt.moe_sum(x), torch.ops.moe_routing.moe_sum(x))\n"
        "print('ok')\n")
    env = dict(os.environ, MOE_ROUTING_TORCH_CPP="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_cpp_and_python_paths_agree():
    """The C++ operators against the Python path of the same call (moe_routing._ext through the DLPack API)."""
    for numel, e, b in [(0, 8, 4), (1, 256, 16), (999, 60, 16), (4096, 256, 64), (300, 4096, 32)]:
        ids = ids_tensor(numel, e, seed=numel)
        got = mt.align_block_size(ids, e, b)
        want = mt._align_impl(ids, e, b)
        for g, w in zip(got, want):  # every element: the library writes the tails too
            assert torch.equal(g, w)
        check_align(ids, e, b, got)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(33, 4, 65, device=DEV).to(dtype)
        assert torch.equal(mt.moe_sum(x), mt._sum_impl(x))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_align_every_id_type(dtype):
    ids = ids_tensor(3000, 60, seed=1, dtype=getattr(torch, dtype))
    check_align(ids, 60, 16, mt.align_block_size(ids, 60, 16))
    check_align(ids, 60, 16, torch.ops.moe_routing.align_block_size(ids, 60, 16))


def test_align_out_op_writes_in_place():
    ids = ids_tensor(100, 8, seed=2)
    cap, blocks = moe_routing.align_max_padded(100, 8, 4), moe_routing.align_max_blocks(100, 8, 4)
    out = (torch.empty(cap, dtype=torch.int32, device=DEV), torch.empty(blocks, dtype=torch.int32, device=DEV),
           torch.empty(1, dtype=torch.int32, device=DEV))
    torch.ops.moe_routing.align_block_size_out(ids, 8, 4, *out)
    check_align(ids, 8, 4, out)


def test_opcheck():
    ids = ids_tensor(64, 8, seed=3)
    torch.library.opcheck(torch.ops.moe_routing.align_block_size.default, (ids, 8, 4))
    cap, blocks = moe_routing.align_max_padded(64, 8, 4), moe_routing.align_max_blocks(64, 8, 4)
    out = (torch.empty(cap, dtype=torch.int32, device=DEV), torch.empty(blocks, dtype=torch.int32, device=DEV),
           torch.empty(1, dtype=torch.int32, device=DEV))
    torch.library.opcheck(torch.ops.moe_routing.align_block_size_out.default, (ids, 8, 4) + out)
    x = torch.randn(5, 3, 16, device=DEV)
    torch.library.opcheck(torch.ops.moe_routing.moe_sum.default, (x,))
    torch.library.opcheck(torch.ops.moe_routing.moe_sum.default, (x.requires_grad_(),))
    torch.library.opcheck(torch.ops.moe_routing.moe_sum_out.default, (x.detach(), torch.empty(5, 16, device=DEV)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16] if torch else [])
def test_moe_sum_matches_fp32_reference(dtype):
    x = torch.randn(33, 4, 257, device=DEV).to(dtype)
    got = mt.moe_sum(x)
    acc = torch.zeros(33, 257, device=DEV)
    for k in range(4):
        acc = acc + x[:, k].float()
    assert torch.equal(got, acc.to(dtype))


def test_moe_sum_autograd():
    x = torch.randn(4, 3, 8, device=DEV, requires_grad=True)
    y = mt.moe_sum(x)
    (y * torch.arange(8.0, device=DEV)).sum().backward()
    assert torch.equal(x.grad, torch.arange(8.0, device=DEV).expand(4, 3, 8))


def test_generic_api_routes_torch_tensors_here():
    ids = ids_tensor(50, 6, seed=4)
    got = moe_routing.align_block_size(ids, 6, 8)
    assert all(isinstance(a, torch.Tensor) and a.device == ids.device for a in got)
    check_align(ids, 6, 8, got)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    torch._dynamo.reset()

    def layer(ids, x):
        s, e, p = mt.align_block_size(ids, 16, 8)
        y = mt.moe_sum(x) * 2
        cap = torch.empty_like(s)
        s2, e2, p2 = mt.align_block_size(ids, 16, 8, out=(cap, torch.empty_like(e), torch.empty_like(p)))
        return s, e, p, y, s2, p2

    f = torch.compile(layer, fullgraph=True, backend=backend)
    for n in (40, 40, 77):  # a second shape: recompiles (or a dynamic graph), still right
        ids = ids_tensor(n, 16, seed=n)
        x = torch.randn(n, 3, 32, device=DEV)
        s, e, p, y, s2, p2 = f(ids, x)
        check_align(ids, 16, 8, (s, e, p))
        assert torch.equal(s2, s) and torch.equal(p2, p)
        assert torch.equal(y, mt.moe_sum(x) * 2)


def test_torch_compile_vllm_wrapper_dynamic():
    torch._dynamo.reset()
    f = torch.compile(lambda ids: mt.moe_align_block_size(ids, 16, 64), fullgraph=True, dynamic=True,
                      backend="aot_eager")
    for n in (3, 9, 200):
        ids = ids_tensor(n, 64, seed=n)
        got, want = f(ids), mt.moe_align_block_size(ids, 16, 64)
        for a, b in zip(got, want):
            assert torch.equal(a, b)


# ---- vLLM's moe_align_block_size ------------------------------------------------------------------------------

@pytest.mark.parametrize("numel,num_experts,block_size,pad", [
    (8, 256, 16, False), (8, 256, 16, True), (12, 4, 4, False), (4096, 64, 64, True), (0, 8, 16, False),
    (100, 7, 1, False), (30, 300, 32, True)])
def test_vllm_drop_in_shapes_and_contents(numel, num_experts, block_size, pad):
    ids = ids_tensor(numel, num_experts, seed=numel).clamp(0, num_experts - 1)
    s, e, p = mt.moe_align_block_size(ids.view(-1, 1) if numel else ids, block_size, num_experts,
                                      pad_sorted_ids=pad)
    length = numel + num_experts * (block_size - 1)
    if pad:
        length = -(-length // block_size) * block_size
    assert s.shape == (length,) and e.shape == (-(-length // block_size),) and p.shape == (1,)
    assert s.dtype == e.dtype == p.dtype == torch.int32
    rs, re, rp, _, _ = oracle.align(ids.cpu().numpy(), num_experts, block_size)
    total = int(rp[0])
    assert int(p.item()) == total
    s, e = s.cpu().numpy(), e.cpu().numpy()
    np.testing.assert_array_equal(s[:total], rs[:total])
    np.testing.assert_array_equal(s[total:], numel)  # sentinel past the groups, as vLLM
    np.testing.assert_array_equal(e[: total // block_size], re[: total // block_size])
    np.testing.assert_array_equal(e[total // block_size:], -1)


def test_vllm_docstring_example():
    ids = torch.tensor([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], dtype=torch.int32, device=DEV) - 1
    s, e, p = mt.moe_align_block_size(ids, 4, 4)
    assert int(p.item()) == 16
    assert s[:16].tolist() == [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12]
    assert e[:4].tolist() == [0, 1, 2, 3]


def test_vllm_expert_map():
    ids = ids_tensor(64, 8, seed=5).clamp(0, 7)
    emap = torch.tensor([-1, 0, -1, 1, -1, 2, -1, 3], dtype=torch.int32, device=DEV)
    if not moe_routing.available("align_block_size_ep"):
        with pytest.raises(moe_routing.NotAvailable):
            mt.moe_align_block_size(ids, 4, 8, emap)
        return
    s, e, p = mt.moe_align_block_size(ids, 4, 8, emap)
    rs, re, rp, _, _ = oracle.align(ids.cpu().numpy(), 8, 4, expert_map=emap.cpu().numpy(), num_local=8)
    total = int(rp[0])
    assert int(p.item()) == total
    assert s.shape == (64 + 8 * 3,)
    np.testing.assert_array_equal(s.cpu().numpy()[:total], rs[:total])
    np.testing.assert_array_equal(e.cpu().numpy()[: total // 4], re[: total // 4])


# ---- errors ---------------------------------------------------------------------------------------------------

def test_torch_errors():
    ids = ids_tensor(16, 4)
    with pytest.raises(moe_routing.Unsupported, match="topk_ids must have an integer dtype"):
        mt.align_block_size(ids.float(), 4, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="topk_ids must be contiguous"):
        mt.align_block_size(ids.view(4, 4).t(), 4, 4)
    with pytest.raises(moe_routing.InvalidArgument, match="block_size must be >= 1"):
        mt.align_block_size(ids, 4, 0)
    with pytest.raises(moe_routing.InvalidArgument, match="sorted_token_ids has 3 elements"):
        mt.align_block_size(ids, 4, 4, out=(torch.empty(3, dtype=torch.int32, device=DEV),) * 3)
    with pytest.raises(moe_routing.InvalidArgument, match="x must have shape"):
        mt.moe_sum(torch.zeros(3, 4, device=DEV))
    with pytest.raises(moe_routing.Unsupported, match="x must be float32"):
        mt.moe_sum(torch.zeros(3, 4, 2, dtype=torch.float64, device=DEV))
    with pytest.raises(moe_routing.InvalidArgument, match="out must be torch.float32"):
        mt.moe_sum(torch.zeros(3, 4, 2, device=DEV), out=torch.zeros(3, 2, dtype=torch.float16, device=DEV))
    with pytest.raises(moe_routing.InvalidArgument, match="overlaps"):
        x = torch.zeros(3, 1, 2, device=DEV)
        mt.moe_sum(x, out=x.view(3, 2))
    with pytest.raises(moe_routing.InvalidArgument, match="must be a (CPU|CUDA) tensor"):
        mt.align_block_size(torch.zeros(4, dtype=torch.int32, device="meta"), 4, 4)


# ---- CUDA: streams, graphs, no host synchronisation -----------------------------------------------------------

gpu = pytest.mark.skipif(not GPU or torch is None or not torch.cuda.is_available(), reason="needs a CUDA build")


@gpu
def test_runs_on_the_current_stream():
    ids = ids_tensor(20000, 256, seed=6)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(10_000_000)  # a long kernel first: a call on another stream would race it
        big = ids * 1  # recomputed on the side stream after the sleep
        got = mt.align_block_size(big, 256, 64)
    torch.cuda.current_stream().wait_stream(side)
    check_align(ids, 256, 64, got)


@gpu
def test_no_host_synchronisation():
    ids = ids_tensor(4096, 256, seed=7)
    x = torch.randn(64, 8, 128, device=DEV)
    mt.align_block_size(ids, 256, 64), mt.moe_sum(x)  # warm the workspace cache
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            mt.align_block_size(ids, 256, 64)
            mt.moe_sum(x)
            mt.moe_align_block_size(ids, 64, 256)
            torch.ops.moe_routing.align_block_size(ids, 256, 64)
    finally:
        torch.cuda.set_sync_debug_mode(0)


@gpu
@pytest.mark.parametrize("numel", [8, 4096, 40000])
def test_cuda_graph_capture(numel):
    ids = ids_tensor(numel, 256, seed=numel)
    x = torch.randn(max(numel // 8, 1), 8, 64, device=DEV)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream: workspaces cached outside the capture
        mt.align_block_size(ids, 256, 64), mt.moe_sum(x)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        out = mt.align_block_size(ids, 256, 64)
        ysum = mt.moe_sum(x)
        vl = mt.moe_align_block_size(ids, 64, 256)
    for seed in (1, 2):  # replay on new inputs, written in place
        ids.copy_(ids_tensor(numel, 256, seed=seed * 1000 + numel))
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        check_align(ids, 256, 64, out)
        assert torch.equal(ysum, mt.moe_sum(x))
        for a, b in zip(vl, mt.moe_align_block_size(ids, 64, 256)):
            assert torch.equal(a, b)


@gpu
def test_wrong_device_index():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    ids = torch.zeros(8, dtype=torch.int32, device="cuda:1")
    with pytest.raises(moe_routing.InvalidArgument, match="current device"):
        mt.align_block_size(ids, 4, 4)


# ---- the newer operations as custom operators (where this build has them) -------------------------------------

def _have(*ops):
    return pytest.mark.skipif(not all(moe_routing.available(o) for o in ops), reason=f"needs {ops} in this build")


@_have("align_block_size_ep", "permute", "combine")
def test_data_path_opcheck():
    ids = ids_tensor(48, 8, seed=9).view(12, 4)
    emap = torch.tensor([0, -1, 1, -1, 2, -1, 3, -1], dtype=torch.int32, device=DEV)
    torch.library.opcheck(torch.ops.moe_routing.align_block_size_ep.default, (ids, 8, 4, emap, 4, True, True))
    torch.library.opcheck(torch.ops.moe_routing.align_block_size_ep.default, (ids, 8, 4, None, 8, False, False))
    s, e, p, c, t = mt.align_block_size_ep(ids, 8, 4, emap, 4, with_positions=True)
    h = torch.randn(12, 16, device=DEV)
    # rows past num_tokens_post_pad are unwritten (torch.empty): outputs of two runs differ there, so no
    # eager-vs-traced output comparison for permute
    torch.library.opcheck(torch.ops.moe_routing.permute.default, (h, s, p, 4),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    rows = mt.permute(h, s, p, 4)
    rows[s >= 48] = 0  # padding rows are zeros; rows past num_tokens_post_pad are unwritten
    rows[int(p.item()):] = 0
    w = torch.rand(12, 4, device=DEV)
    torch.library.opcheck(torch.ops.moe_routing.combine.default, (rows, w, t, 4, "permuted", 1.0))


@_have("align_block_size_ep", "permute", "combine")
def test_moe_layer_compiles_fullgraph():
    torch._dynamo.reset()
    E, K, H = 8, 2, 16
    wexp = torch.randn(E, H, H, device=DEV)

    def layer(x, ids, w):
        s, e, p, c, t = mt.align_block_size_ep(ids, E, 4, with_positions=True)
        rows = mt.permute(x, s, p, K)
        y = torch.bmm(rows.view(-1, 4, H), wexp[e.clamp(min=0)]).view(-1, H)
        return mt.combine(y, w, t, layout="permuted")

    x = torch.randn(10, H, device=DEV)
    ids = torch.randint(0, E, (10, K), dtype=torch.int32, device=DEV)
    w = torch.rand(10, K, device=DEV)
    eager = layer(x, ids, w)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")(x, ids, w)
    assert torch.equal(eager, compiled)
    ref = sum(w[:, k:k + 1] * (x.unsqueeze(1) @ wexp[ids[:, k].long()]).squeeze(1) for k in range(K))
    torch.testing.assert_close(eager, ref, rtol=1e-5, atol=1e-5)


@_have("topk_gating", "route")
def test_gating_opcheck_and_compile():
    lg = torch.randn(6, 32, device=DEV)
    bias = torch.randn(32, device=DEV) * 0.01
    torch.library.opcheck(torch.ops.moe_routing.topk_gating.default, (lg, 4, "sigmoid", 4, 2, bias, True, 2.5))
    emap = torch.arange(32, dtype=torch.int32, device=DEV) - 16
    torch.library.opcheck(torch.ops.moe_routing.route.default,
                          (lg, 4, 8, emap, 16, "softmax", 1, 1, None, False, 1.0, True))
    torch._dynamo.reset()
    f = torch.compile(lambda x: mt.route(x, 4, 8, score="sigmoid", num_groups=4, topk_groups=2,
                                         correction_bias=bias, renormalize=True), fullgraph=True, backend="aot_eager")
    for a, b in zip(f(lg), mt.route(lg, 4, 8, score="sigmoid", num_groups=4, topk_groups=2, correction_bias=bias,
                                    renormalize=True)):
        assert torch.equal(a, b)
