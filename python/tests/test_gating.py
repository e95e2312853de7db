"""Gating (issue 28: topk_gating, route) from every framework, against the NumPy oracle (ids exactly on separated
scores, weights to 1e-6: the oracle uses NumPy's exp, the library its own); skipped where this build's
routing.h does not declare the operation yet."""

import numpy as np
import pytest

import moe_routing
import oracle
from conftest import requires

FAMILIES = {  # name: (num_experts, topk, kwargs) with the real sizes of each model family
    "mixtral": (8, 2, dict(score="softmax", renormalize=True)),
    "qwen": (128, 8, dict(score="softmax", renormalize=False)),
    "deepseek_v3": (256, 8, dict(score="sigmoid", num_groups=8, topk_groups=4, renormalize=True,
                                 routed_scaling_factor=2.5, bias=True)),
    "kimi_k2": (384, 8, dict(score="sigmoid", renormalize=True, routed_scaling_factor=2.827, bias=True)),
    "llama4": (16, 1, dict(score="sigmoid")),
    "gpt_oss": (32, 4, dict(score="softmax_topk")),
}


def separated_logits(rng, tokens, experts):
    """Logits whose scores differ enough that any correct exp picks the same experts."""
    base = np.array([rng.permutation(experts) for _ in range(tokens)], np.float32).reshape(tokens, experts)
    return (base * 0.05 + rng.standard_normal((tokens, experts)).astype(np.float32) * 0.001).astype(np.float32)


def gate_kwargs(kw, rng, experts, xp):
    kw = dict(kw)
    bias = kw.pop("bias", False)
    ref_bias = (rng.standard_normal(experts) * 0.01).astype(np.float32) if bias else None
    if bias:
        kw["correction_bias"] = xp.asarray(ref_bias)
    return kw, ref_bias


@requires("topk_gating")
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("tokens", [0, 1, 16, 300])
def test_topk_gating_families(xp, family, tokens):
    experts, k, kw = FAMILIES[family]
    rng = np.random.default_rng(tokens + experts)
    lg = separated_logits(rng, tokens, experts)
    kw, ref_bias = gate_kwargs(kw, rng, experts, xp)
    ids, w = moe_routing.topk_gating(xp.asarray(lg), k, **kw)
    assert xp.is_mine(ids) and xp.is_mine(w)
    ref_kw = {k2: v for k2, v in kw.items() if k2 != "correction_bias"}
    rs = ref_kw.pop("routed_scaling_factor", 1.0)
    rids, rw = oracle.topk_gating(lg, k, bias=ref_bias, scale=rs, **ref_kw)
    gi, gw = xp.numpy(ids), xp.numpy(w)
    assert gi.shape == (tokens, k) and gi.dtype == np.int32 and gw.dtype == np.float32
    np.testing.assert_array_equal(gi, rids)
    np.testing.assert_allclose(gw, rw, rtol=2e-6, atol=1e-7)


@requires("topk_gating")
def test_topk_gating_half_inputs(xp):
    rng = np.random.default_rng(1)
    lg = separated_logits(rng, 20, 64).astype(np.float16)
    ids, w = moe_routing.topk_gating(xp.asarray(lg), 4, renormalize=True)
    rids, rw = oracle.topk_gating(lg.astype(np.float32), 4, renormalize=True)
    np.testing.assert_array_equal(xp.numpy(ids), rids)
    np.testing.assert_allclose(xp.numpy(w), rw, rtol=2e-6)


@requires("topk_gating")
def test_topk_gating_errors(np_or_torch):
    xp = np_or_torch
    lg = xp.asarray(np.zeros((4, 8), np.float32))
    with pytest.raises(moe_routing.InvalidArgument, match="score must be"):
        moe_routing.topk_gating(lg, 2, score="relu")
    with pytest.raises(moe_routing.Unsupported, match="logits must be float32"):
        moe_routing.topk_gating(xp.asarray(np.zeros((4, 8), np.int32)), 2)
    with pytest.raises(moe_routing.InvalidArgument, match="logits must have shape"):
        moe_routing.topk_gating(xp.asarray(np.zeros(8, np.float32)), 2)
    with pytest.raises(moe_routing.InvalidArgument, match="correction_bias must"):
        moe_routing.topk_gating(lg, 2, correction_bias=xp.asarray(np.zeros(7, np.float32)))
    with pytest.raises(moe_routing.InvalidArgument, match="topk"):
        moe_routing.topk_gating(lg, 9)
    with pytest.raises(moe_routing.InvalidArgument, match="topk_ids has"):
        moe_routing.topk_gating(lg, 2, out=(xp.empty((4, 1), np.int32), xp.empty((4, 2), np.float32)))


@requires("route")
@pytest.mark.parametrize("ep", [False, True])
def test_route_equals_gating_then_align(xp, ep):
    experts, k, kw = FAMILIES["deepseek_v3"]
    rng = np.random.default_rng(3)
    lg = separated_logits(rng, 50, experts)
    kw, _ = gate_kwargs(kw, rng, experts, xp)
    emap = None
    local = None
    if ep:
        m = np.full(experts, -1, np.int32)
        m[32:64] = np.arange(32)
        emap, local = xp.asarray(m), 32
    ids, w, s, e, p, pos = moe_routing.route(xp.asarray(lg), k, 16, expert_map=emap, num_local_experts=local, **kw)
    gids, gw = moe_routing.topk_gating(xp.asarray(lg), k, **kw)
    np.testing.assert_array_equal(xp.numpy(ids), xp.numpy(gids))
    np.testing.assert_array_equal(xp.numpy(w).view(np.uint32), xp.numpy(gw).view(np.uint32))
    ref = oracle.align(xp.numpy(gids), experts, 16, expert_map=None if emap is None else xp.numpy(emap),
                       num_local=local)
    for g, r in zip((s, e, p), ref[:3]):
        np.testing.assert_array_equal(xp.numpy(g), r)
    np.testing.assert_array_equal(xp.numpy(pos).reshape(-1), ref[4])
