"""moe_routing.ep over MPI, run under a launcher with 1..4 ranks (ctest python_ep_mpi_np1..4; .ci/run's pip job):
    mpirun -np 3 python -m pytest -q python/tests/test_ep_mpi.py
Every rank builds every rank's inputs from a shared seed, runs its tokens through dispatch_layout -> dispatch ->
the experts (align_block_size_ep -> permute -> a simple expert, or the flat layout) -> combine, and compares bit
for bit with the single-process run of the whole layer (the package's align_block_size_ep, permute, the same
expert, combine; the NumPy oracle's combine for bfloat16): uneven tokens per rank, ranks with no tokens or no
experts, both modes, every dtype; and the error cases, which must raise on every rank (never hang).
A plain `pytest` (no launcher) skips this file; MOE_TEST_MPI=1 runs it in one process (an MPI singleton)."""

import os
import re
import zlib

import numpy as np
import pytest

import moe_routing
import oracle
from moe_routing import ep

_LAUNCHED = any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"))
if not moe_routing.available("ep_mpi"):
    pytest.skip("this build of moe_routing has no MPI transport", allow_module_level=True)
if not (_LAUNCHED or os.environ.get("MOE_TEST_MPI") == "1"):
    pytest.skip("multi-rank tests: run under mpirun (mpirun -np N python -m pytest python/tests/test_ep_mpi.py)",
                allow_module_level=True)
MPI = pytest.importorskip("mpi4py.MPI")

WORLD = MPI.COMM_WORLD
ME, W = WORLD.Get_rank(), WORLD.Get_size()


def agree(ok, what=""):
    """Every rank learns whether all passed (no rank leaves a test while another is still in its collectives)."""
    all_ok = WORLD.allreduce(bool(ok), op=MPI.LAND)
    assert ok, what
    assert all_ok, "another rank failed this test (see its report)"


def raises_everywhere(f, cls, mine, others, faulty=None):
    """f() raises cls on every rank: text `mine` on the faulty rank(s) (all when faulty is None), else `others`."""
    with pytest.raises(cls) as e:
        f()
    want = mine if faulty is None or ME == faulty else others
    agree(re.search(want, str(e.value)) is not None, f"rank {ME}: {str(e.value)!r} does not match {want!r}")


# ---- values: containers for the dtypes NumPy lacks (bfloat16 as uint16 bits) ----------------------------------------
CONTAINER = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "uint8": np.uint8}


def to_f32(x, dt):
    return oracle.bf16_to_f32(x) if dt == "bfloat16" else np.asarray(x).astype(np.float32)


def from_f32(y, dt):
    b = oracle.from_f32(y, dt)  # the bits, NaN canonical
    return b.view(CONTAINER[dt]) if dt != "bfloat16" else b.astype(np.uint16)


def random_rows(rng, n, h, dt):
    if dt == "uint8":
        return rng.integers(0, 256, size=(n, h)).astype(np.uint8)
    return from_f32(rng.standard_normal((n, h)).astype(np.float32) * np.float32(2), dt)


def expert(global_ids, rows, in_dt, out_dt, scales, identity):
    """The experts: the same function on the expert's rank and in the single-process run (fp32, no FMA)."""
    if identity:
        return rows.copy()
    with np.errstate(all="ignore"):  # permute leaves rows past num_tokens_post_pad unwritten: never read
        return _expert(global_ids, rows, in_dt, out_dt, scales)


def _expert(global_ids, rows, in_dt, out_dt, scales):
    x = to_f32(rows, in_dt)
    if scales is not None and scales.shape[1] > 0:
        x = (x * scales[:, np.arange(x.shape[1]) % scales.shape[1]]).astype(np.float32)
    e = global_ids.astype(np.float32)
    a = (np.float32(1) + e / np.float32(64)).astype(np.float32)
    b = ((global_ids % 7).astype(np.float32) * np.float32(0.125) - np.float32(0.25)).astype(np.float32)
    y = (x * a[:, None]).astype(np.float32)
    return from_f32((y + b[:, None]).astype(np.float32), out_dt)


def combine_bits(rows, dt, n, k, positions, weights, scale):
    """The single-process combine, permuted layout: the package's for float32 / float16, the oracle's for
    bfloat16 (NumPy has no bfloat16 array the generic combine could take)."""
    if dt == "bfloat16":
        return oracle.combine(rows, dt, n, k, positions=positions, weights=weights, scale=scale, layout="permuted")
    out = moe_routing.combine(rows, weights, positions.reshape(n, k), layout="permuted", scale=scale)
    return bits_of(out, dt)


# ---- a layer, the same on every rank --------------------------------------------------------------------------------
class Layer:
    def __init__(self, seed, *, placement_seed=None, per_rank=3, experts=None, placement="blocks", topk=2, hidden=24, in_dt="float32",
                 out_dt="float32", spt=0, weights=True, scale=1.0, mode=ep.EXACT, layout="permuted", identity=False,
                 tokens=None, skew=False, block_size=4, slack=2):
        prng = np.random.default_rng(seed if placement_seed is None else placement_seed)  # the same for every layer
        rng = np.random.default_rng(seed)
        self.E = experts if experts is not None else W * per_rank
        self.K, self.H, self.in_dt, self.out_dt, self.spt = topk, hidden, in_dt, out_dt, spt
        self.weights, self.scale, self.mode, self.layout, self.identity = weights, scale, mode, layout, identity
        self.block_size = block_size
        if placement == "blocks":
            self.expert_rank = self.expert_local = None
            per = self.E // W
            self.rank_of = np.arange(self.E) // per
            self.local_of = np.arange(self.E) % per
        else:  # random: ranks past `busy` hold no experts; local indices shuffled for "shuffled"
            busy = max(1, W - 1) if W > 1 else 1
            self.rank_of = prng.integers(0, busy, size=self.E).astype(np.int32)
            self.local_of = np.zeros(self.E, np.int32)
            for r in range(W):
                mine = np.nonzero(self.rank_of == r)[0]
                perm = prng.permutation(mine.size) if placement == "shuffled" else np.arange(mine.size)
                self.local_of[mine] = perm
            self.expert_rank = self.rank_of
            self.expert_local = self.local_of if placement == "shuffled" else None
        self.tokens = list(tokens) if tokens is not None else [int(rng.integers(0, 120)) for _ in range(W)]
        hot = np.arange(self.E) if not skew else np.nonzero(self.rank_of == self.rank_of[0])[0]
        self.ids, self.hidden, self.scales, self.w = [], [], [], []
        for t in self.tokens:
            ids = np.stack([rng.permutation(hot)[:topk] if hot.size >= topk else rng.choice(hot, topk)
                            for _ in range(t)]) if t else np.zeros((0, topk), np.int64)
            self.ids.append(ids.astype(np.int32).reshape(t, topk))
            self.hidden.append(random_rows(rng, t, hidden, in_dt))
            self.scales.append((rng.integers(1, 64, size=(t, spt)) / 16).astype(np.float32))
            self.w.append((rng.standard_normal((t, topk)) / 3).astype(np.float32))
        self.max_tokens = max(self.tokens) + slack
        self.capacity = 0
        if mode == ep.CAPACITY:
            most = 0
            for s in range(W):
                for d in range(W):
                    if self.tokens[s]:
                        most = max(most, int(np.sum(np.any(self.rank_of[self.ids[s]] == d, axis=1))))
            self.capacity = most + slack

    def config(self, **kw):
        c = ep.Config(max_tokens=self.max_tokens, hidden=self.H, topk=self.K, dispatch_dtype=self.in_dt,
                      combine_dtype=self.out_dt, scales_per_token=self.spt, mode=self.mode, capacity=self.capacity)
        for k, v in kw.items():
            setattr(c, k, v)
        return c

    def comm(self):
        return ep.Comm.from_mpi(WORLD, self.E, self.expert_rank, self.expert_local)

    def expected_rows(self, me):
        """(source, token) of every row rank `me` receives, in order."""
        return [(s, t) for s in range(W) for t in range(self.tokens[s])
                if np.any(self.rank_of[self.ids[s][t]] == me)]

    def reference(self, me):
        """The single-process run of the whole layer (every rank's tokens), rank me's rows of the output."""
        ids = np.concatenate(self.ids)
        n, k = ids.shape
        hid = np.concatenate(self.hidden)
        sc = np.concatenate(self.scales)
        w = np.concatenate(self.w) if self.weights else None
        s, e, p, _, pos = moe_routing.align_block_size_ep(ids, self.E, self.block_size, with_positions=True)
        perm = moe_routing.permute(hid, s, p, k)
        perm_sc = moe_routing.permute(sc, s, p, k) if self.spt else None
        row_expert = np.maximum(np.repeat(e, self.block_size)[: s.size], 0)
        y = expert(row_expert, perm, self.in_dt, self.out_dt, perm_sc, self.identity)
        out = combine_bits(y, self.out_dt, n, k, pos, w, self.scale)
        first = sum(self.tokens[:me])
        return out[first:first + self.tokens[me]]

    def run(self, handle, comm, me):
        """This rank's part of the layer through moe_routing.ep; returns (dispatch problems, output bits)."""
        K, H = self.K, self.H
        n = handle.dispatch_layout(self.ids[me])
        want = self.expected_rows(me)
        cap = self.mode == ep.CAPACITY
        cap_rows = handle.config().capacity  # the handle's: it may hold more than this layer needs
        R = W * cap_rows if cap else len(want)
        problems = []
        if n.recv_rows != R:
            problems.append(f"recv_rows {n.recv_rows} != {R}")
        rh, rs, ri, rw = handle.dispatch(self.hidden[me], self.scales[me] if self.spt else None,
                                         self.w[me] if self.weights else None)
        assert rh.shape == (R, H) and ri.shape == (R, K) and rw.shape == (R, K)
        assert (rs is None) == (self.spt == 0)
        # what arrived: rows by source rank, then token order (capacity: slab s starts at row s * capacity)
        seen = [0] * W
        present = 0
        for s, t in want:
            r = s * cap_rows + seen[s] if cap else sum(seen)
            seen[s] += 1
            gl = self.ids[s][t]
            local = np.where(self.rank_of[gl] == me, self.local_of[gl], -1)
            present += int(np.sum(local >= 0))
            if not np.array_equal(rh[r].view(np.uint8), self.hidden[s][t].view(np.uint8)):
                problems.append(f"recv_hidden[{r}] (source {s}, token {t})")
            if not np.array_equal(ri[r], local):
                problems.append(f"recv_topk_ids[{r}] = {ri[r]} != {local}")
            wt = self.w[s][t] if self.weights else np.ones(K, np.float32)
            if not np.array_equal(rw[r].view(np.uint32), wt.view(np.uint32)):
                problems.append(f"recv_topk_weights[{r}]")
            if self.spt and not np.array_equal(rs[r], self.scales[s][t]):
                problems.append(f"recv_scales[{r}]")
        if cap:
            for s in range(W):
                pad = ri[s * cap_rows + seen[s]:(s + 1) * cap_rows]
                if pad.size and not np.all(pad == -1):
                    problems.append(f"slab {s}: rows past what it sent have ids {np.unique(pad)}")
        elif n.recv_slots != present:
            problems.append(f"recv_slots {n.recv_slots} != {present}")
        # the experts of this rank
        L = comm.num_local_experts()
        glob = comm.local_experts()
        sc = rs if self.spt else None
        if self.layout == "permuted" and L > 0:
            s2, e2, p2, _, pos = moe_routing.align_block_size_ep(ri, L, self.block_size, with_positions=True)
            perm = moe_routing.permute(rh, s2, p2, K)
            perm_sc = moe_routing.permute(sc, s2, p2, K) if sc is not None else None
            row_expert = glob[np.maximum(np.repeat(e2, self.block_size)[: s2.size], 0)]
            y = expert(row_expert, perm, self.in_dt, self.out_dt, perm_sc, self.identity)
            out = handle.combine(y, pos, self.w[me] if self.weights else None, self.scale)
        else:  # flat: row r * topk + k for each present slot; the others are NaN bits and never read
            y = np.zeros((R * K, H), CONTAINER[self.out_dt])
            y.view(np.uint8)[:] = 0xFF
            r_idx, k_idx = np.nonzero(ri >= 0)
            if r_idx.size:
                y[r_idx * K + k_idx] = expert(glob[ri[r_idx, k_idx]], rh[r_idx], self.in_dt, self.out_dt,
                                              sc[r_idx] if sc is not None else None, self.identity)
            out = handle.combine(y, None, self.w[me] if self.weights else None, self.scale)
        assert out.shape == (self.tokens[me], H)
        return problems, out


def bits_of(a, dt):
    return np.ascontiguousarray(a).view({"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}[dt])


def check_layers(kw, seed, layers=2):
    """`layers` layers of one shape and placement (new inputs each) on one handle, each checked bit for bit."""
    Ls = [Layer(seed + 1000 * i, placement_seed=seed, **kw) for i in range(layers)]
    comm = Ls[0].comm()
    handle = ep.Handle(comm, Ls[0].config(max_tokens=max(L.max_tokens for L in Ls),
                                          capacity=max(L.capacity for L in Ls)))
    for i, L in enumerate(Ls):
        problems, out = L.run(handle, comm, ME)
        same = np.array_equal(bits_of(out, L.out_dt), L.reference(ME))
        agree(not problems and same, f"rank {ME}, layer {i}: {problems[:5]}, output bit-identical: {same}")


CASES = {
    "f32_identity_flat": dict(in_dt="float32", out_dt="float32", identity=True, layout="flat"),
    "f16_permuted_scale": dict(in_dt="float16", out_dt="float16", scale=0.37),
    "bf16_random_placement_no_weights": dict(in_dt="bfloat16", out_dt="bfloat16", placement="random", weights=False,
                                             experts=13),
    "uint8_scales_capacity": dict(in_dt="uint8", out_dt="float32", spt=2, mode=ep.CAPACITY),
    "f32_to_bf16_shuffled_capacity_flat": dict(in_dt="float32", out_dt="bfloat16", placement="shuffled", experts=11,
                                               mode=ep.CAPACITY, layout="flat", hidden=5),
    "f16_to_f32_first_rank_empty": dict(in_dt="float16", out_dt="float32", tokens=[0] + [37 * r + 5 for r in range(1, W)]),
    "last_rank_empty_topk1": dict(out_dt="float16", topk=1, tokens=[50 + r for r in range(W - 1)] + [0]),
    "every_rank_empty": dict(tokens=[0] * W, mode=ep.CAPACITY, slack=1),
    "skewed_onto_one_rank": dict(skew=True, in_dt="bfloat16", out_dt="float32", topk=3, per_rank=4),
    "topk8_block1_scales": dict(topk=8, per_rank=8, block_size=1, spt=3, in_dt="float16", out_dt="bfloat16"),
    "capacity_one_token_each": dict(tokens=[1] * W, mode=ep.CAPACITY, slack=0, layout="flat"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_matches_single_process(name):
    check_layers(CASES[name], seed=zlib.crc32(name.encode()) % 100003)


def test_comm_info_and_placement():
    rank_of = np.array([(3 * e + 1) % W for e in range(2 * W + 1)], np.int32)
    comm = ep.Comm.from_mpi(WORLD, rank_of.size, rank_of)
    mine = np.nonzero(rank_of == ME)[0]
    ok = (comm.rank(), comm.world_size(), comm.num_experts(), comm.num_local_experts()) == (ME, W, rank_of.size, mine.size)
    emap = comm.expert_map()
    ok &= emap.dtype == np.int32 and np.array_equal(emap[mine], np.arange(mine.size)) and np.all(emap[rank_of != ME] == -1)
    ok &= np.array_equal(comm.local_experts(), mine) and comm.transport == "mpi"
    blocks = ep.Comm.from_mpi(WORLD, 2 * W)
    ok &= np.array_equal(blocks.local_experts(), [2 * ME, 2 * ME + 1])
    agree(ok, f"rank {ME}: {comm!r}")


def test_config_resolved_and_sizes():
    layer = Layer(5, tokens=[10 + r for r in range(W)])
    comm = layer.comm()
    h = ep.Handle(comm, layer.config(max_tokens=10 + ME))  # max_tokens is per rank
    c = h.config()
    want_rows = sum(10 + r for r in range(W))
    ok = (c.max_recv_rows == want_rows and c.max_recv_slots == want_rows * min(layer.K, comm.num_local_experts())
          and h.recv_buffer_rows() == want_rows and h.staging_bytes() > 0 and c.dispatch_dtype == "float32")
    hc = ep.Handle(comm, max_tokens=8, hidden=4, topk=2, mode=ep.CAPACITY, capacity=3)
    ok &= hc.config().slot_capacity == 3 * min(2, 3) and hc.recv_buffer_rows() == 3 * W
    agree(ok, f"rank {ME}: {c}")


# ---- errors: the same on every rank, the handle usable afterwards ---------------------------------------------------
def small():
    layer = Layer(11, tokens=[6 + r for r in range(W)], topk=2)
    comm = layer.comm()
    return layer, comm, ep.Handle(comm, layer.config())


def test_local_argument_error_fails_every_rank_then_the_handle_works():
    layer, comm, h = small()
    bad = W - 1
    ids = layer.ids[ME].astype(np.float32) if ME == bad else layer.ids[ME]
    raises_everywhere(lambda: h.dispatch_layout(ids), moe_routing.InvalidArgument, "topk_ids must be int32",
                      f"rank {bad} reported invalid arguments", faulty=bad)
    wrong = np.ascontiguousarray(layer.ids[ME][:, :1]) if ME == bad else layer.ids[ME]
    raises_everywhere(lambda: h.dispatch_layout(wrong), moe_routing.InvalidArgument,
                      r"topk_ids must have shape \(num_tokens, 2\)", f"rank {bad} reported invalid arguments", faulty=bad)
    problems, out = layer.run(h, comm, ME)  # the handle still works
    agree(not problems and np.array_equal(bits_of(out, "float32"), layer.reference(ME)), f"rank {ME}: {problems}")


def test_bad_expert_id_and_too_many_tokens_fail_every_rank():
    layer, comm, h = small()
    ids = layer.ids[ME].copy()
    if ME == 0:
        ids[-1, 1] = layer.E
    raises_everywhere(lambda: h.dispatch_layout(ids), moe_routing.InvalidArgument, f"rank 0.*{layer.E}", f"rank 0.*{layer.E}")
    many = np.zeros((layer.max_tokens + 1 if ME == W - 1 else 1, 2), np.int32)
    raises_everywhere(lambda: h.dispatch_layout(many), moe_routing.InvalidArgument, "max_tokens", "max_tokens")
    raises_everywhere(lambda: h.dispatch(layer.hidden[ME]), moe_routing.InvalidArgument, "no layout", "no layout")


def test_dispatch_refusals():
    layer, comm, h = small()
    h.dispatch_layout(layer.ids[ME])
    hid = layer.hidden[ME].astype(np.float16) if ME == 0 else layer.hidden[ME]
    raises_everywhere(lambda: h.dispatch(hid), moe_routing.InvalidArgument, "hidden must be float32, the handle's",
                      "rank 0 reported invalid arguments", faulty=0)
    raises_everywhere(lambda: h.dispatch(layer.hidden[ME], np.ones((layer.tokens[ME], 1), np.float32)),
                      moe_routing.InvalidArgument, "scales given but the handle has scales_per_token = 0", "")
    raises_everywhere(lambda: h.dispatch(layer.hidden[ME], out=(1, 2)), moe_routing.InvalidArgument,
                      "out= of dispatch must be a tuple of 4", "")
    R = h.dispatch_layout(layer.ids[ME]).recv_rows
    if WORLD.bcast(R, root=0) == 0:
        pytest.skip("rank 0 receives nothing")
    few = R - 1 if ME == 0 else R
    out = (np.empty((few, layer.H), np.float32), None, np.empty((few, 2), np.int32), None)
    raises_everywhere(lambda: h.dispatch(layer.hidden[ME], out=out), moe_routing.InvalidArgument,
                      "recv_rows = .* is smaller", "rank 0 reported invalid arguments", faulty=0)
    problems, res = layer.run(h, comm, ME)
    agree(not problems and np.array_equal(bits_of(res, "float32"), layer.reference(ME)), f"rank {ME}: {problems}")


def test_combine_refusals():
    layer, comm, h = small()
    h.dispatch_layout(layer.ids[ME])
    rh, _, ri, _ = h.dispatch(layer.hidden[ME])
    y = np.zeros((ri.size, layer.H), np.float32)
    out = np.empty((layer.tokens[ME] + (1 if ME == 0 else 0), layer.H), np.float32)
    raises_everywhere(lambda: h.combine(y, out=out), moe_routing.InvalidArgument, r"out must have shape \(6, 24\)",
                      "rank 0 reported invalid arguments", faulty=0)
    pos = np.full(ri.size, -1, np.int32)
    if ME == 0 and pos.size:
        pos[0] = 10**6
    if WORLD.bcast(pos.size, root=0):
        raises_everywhere(lambda: h.combine(y, pos), moe_routing.InvalidArgument,
                          "token_positions.0. = 1000000 is past expert_out's", "rank 0 reported invalid arguments",
                          faulty=0)
    ok = np.array_equal(bits_of(h.combine(y), "float32"), np.zeros((layer.tokens[ME], layer.H), np.uint32))
    agree(ok, "a combine of zero rows after refusals")


def test_handle_creation_refusals():
    layer = Layer(3, tokens=[4] * W)
    comm = layer.comm()
    raises_everywhere(lambda: ep.Handle(comm, layer.config(dispatch_dtype="complex64" if ME == 0 else "float32")),
                      moe_routing.InvalidArgument, "dispatch_dtype must be one of", "rank 0", faulty=0)
    raises_everywhere(lambda: ep.Handle(comm, layer.config(), colour=3) if ME == 0 else ep.Handle(comm, layer.config()),
                      moe_routing.InvalidArgument, "colour", "rank 0", faulty=0)
    if W > 1:
        raises_everywhere(lambda: ep.Handle(comm, layer.config(hidden=layer.H + (ME == W - 1))),
                          moe_routing.InvalidArgument, "ranks disagree on hidden", "ranks disagree on hidden")
    raises_everywhere(lambda: ep.Handle(comm, layer.config(combine_dtype="int32")), moe_routing.InvalidArgument,
                      "combine_dtype must be MOE_FLOAT32", "combine_dtype must be MOE_FLOAT32")


def test_comm_creation_refusals():
    E = 2 * W
    bad = np.zeros(E - 1 if ME == 0 else E, np.int32)
    raises_everywhere(lambda: ep.Comm.from_mpi(WORLD, E, bad), moe_routing.InvalidArgument,
                      rf"expert_rank must have shape \({E},\)", "rank 0 passed an invalid placement", faulty=0)
    raises_everywhere(lambda: ep.Comm.from_mpi(WORLD, E, np.full(E, W, np.int32)), moe_routing.InvalidArgument,
                      "expert_rank.0. = .* is outside", "expert_rank.0. = .* is outside")
    if W > 1:
        raises_everywhere(lambda: ep.Comm.from_mpi(WORLD, 2 * W + 1), moe_routing.InvalidArgument,
                          "not a multiple of the world size", "not a multiple of the world size")
    raises_everywhere(lambda: ep.Comm.from_mpi(WORLD, E if ME else 0), moe_routing.InvalidArgument,
                      r"num_experts = 0 is outside \[1, 65536\]", "rank 0 passed an invalid placement", faulty=0)
    with pytest.raises(moe_routing.InvalidArgument, match="comm must be an mpi4py communicator"):
        ep.Comm.from_mpi(object(), 8)  # local: no collective was entered
    agree(True)


def test_present_slot_without_row_fails_every_rank_after_writing_nan():
    layer, comm, h = small()
    h.dispatch_layout(layer.ids[ME])
    rh, _, ri, _ = h.dispatch(layer.hidden[ME])
    s, e, p, _, pos = moe_routing.align_block_size_ep(ri, comm.num_local_experts(), 4, with_positions=True)
    y = moe_routing.permute(rh, s, p, layer.K)
    present = np.flatnonzero(pos.reshape(-1) >= 0)
    if not WORLD.bcast(present.size > 0, root=0):
        pytest.skip("rank 0 holds no present slot")
    if ME == 0:
        pos.reshape(-1)[present[0]] = -1  # a present slot of rank 0's experts without its row
    out = np.zeros((layer.tokens[ME], layer.H), np.float32)
    raises_everywhere(lambda: h.combine(y, pos, out=out), moe_routing.InvalidArgument, "negative token_positions",
                      "negative token_positions")
    src, tok = WORLD.bcast(layer.expected_rows(0)[present[0] // layer.K] if ME == 0 else None, root=0)
    agree(ME != src or np.all(np.isnan(out[tok])), f"rank {ME}: token {tok}'s output is not NaN: {out[tok][:4]}")
