"""ejk.jax.ring_attention and zigzag_ring_attention: the static schedule checked pair by pair
against the dense mask of the gathered sequence (every visible pair computed exactly once, a
masked block skipped, zigzag's causal work balanced), then the ring on 2, 3, 4 and 8 virtual CPU
devices against JAX's float64 autodiff of flash_grad_reference.attention on the gathered
sequence and against ejk.jax.flash_attention there: output and the gradients of query, key,
value, sinks and bias, with causal, windows, soft cap, GQA, sinks, a bias (the device's rows,
sharded, or every row, replicated; broadcast batch or heads), segment ids (from mask_info or
given), bfloat16, a padded head_dim, key shards longer than the query shards, both layouts,
under our shard_map (mesh=, also with the batch sharded over a second mesh axis) and inside a
caller's shard_map with check_vma on; and the traced program: each next shard sent before a
step's kernels, a masked block a switch branch with no kernel, a ring of one (with a bias too)
one flash_attention call.
XLA reads the device count once, when jax starts, so the ring cases run in one fresh process
(this module as a script); the pytest process keeps its one device."""
import itertools
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from ejk.jax import ring_attention, zigzag_ring_attention
from ejk.ops import ring_attention as schedule
from ring_errors import assert_within
from torch_support import no_cpu_jit

DEVICES = 8


# --- the schedule --------------------------------------------------------------------------------

def global_rows(layout, n, device, length):
    """Global positions of a device's local rows."""
    owned = schedule.chunks(layout, n, device)
    c = length // len(owned)
    return np.concatenate([np.arange(m * c, (m + 1) * c) for m in owned])


def computed_pairs(calls, sq, sk):
    """How many times each local (row, key) pair is computed by the calls' kernel masks."""
    count = np.zeros((sq, sk), np.int64)
    for c in calls:
        i = np.arange(c.nq)[:, None]
        j = np.arange(c.nk)[None, :]
        vis = np.ones((c.nq, c.nk), bool)
        if c.causal:
            vis &= j <= i
        if c.window is not None:
            vis &= (j >= i - c.window[0]) & (j <= i + c.window[1])
        count[c.q0:c.q0 + c.nq, c.k0:c.k0 + c.nk] += vis
    return count


BANDS = [(None, False), (None, True), ((5, 0), True), ((3, 3), False), ((9, 2), False), ((2, 0), False),
         ((0, 4), False), ((20, 20), True), ((0, 0), False)]


@pytest.mark.parametrize("layout", ["plain", "zigzag"])
def test_the_schedule_computes_each_visible_pair_once(layout):
    for n, (sq, sk), (window, causal) in itertools.product((1, 2, 3, 4), ((8, 8), (4, 12), (6, 2)), BANDS):
        band = schedule.global_band(causal, window)
        for device, step in itertools.product(range(n), range(n)):
            calls = schedule.plan(layout, n, device, step, sq, sk, band)
            qi = global_rows(layout, n, device, sq)[:, None]
            kj = global_rows(layout, n, (device - step) % n, sk)[None, :]
            want = (kj - qi >= band[0]) & (kj - qi <= band[1])
            got = computed_pairs(calls, sq, sk)
            where = (layout, n, sq, sk, window, causal, device, step, calls)
            assert np.array_equal(got, want.astype(np.int64)), where
            assert all(c.nq > 0 and c.nk > 0 for c in calls), where
            if not want.any():
                assert calls == (), where


def test_plain_causal_skips_the_blocks_above_the_diagonal():
    band = schedule.global_band(True, None)
    for device, step in itertools.product(range(4), range(4)):
        calls = schedule.plan("plain", 4, device, step, 8, 8, band)
        if step == 0:
            assert calls == (schedule.Call(0, 8, 0, 8, True, None),)
        elif step > device:  # the shard comes from a later device: nothing visible
            assert calls == ()
        else:
            assert calls == (schedule.Call(0, 8, 0, 8, False, None),)


def test_zigzag_balances_causal_work():
    band = schedule.global_band(True, None)
    n, length = 4, 8
    for step in range(n):
        work = [sum(c.nq * c.nk for c in schedule.plan("zigzag", n, d, step, length, length, band))
                for d in range(n)]
        assert len(set(work)) == 1, (step, work)
        if step:
            assert work[0] == length * length // 2
    # Its own shard is one call, causal on the local order (which is increasing in position).
    assert schedule.plan("zigzag", n, 1, 0, length, length, band) == (schedule.Call(0, 8, 0, 8, True, None),)


def test_a_window_slices_the_block_to_a_band_through_the_diagonal():
    # Keys of the previous shard within 3 of the queries: its last 3 keys, seen by the first 3
    # rows only, as the upper triangle of a 3 x 3 block.
    calls = schedule.plan("plain", 2, 1, 1, 8, 8, schedule.global_band(True, (3, 0)))
    assert calls == (schedule.Call(0, 3, 5, 3, False, (0, 2)),)


# --- argument errors (one device) ----------------------------------------------------------------

def small(rng, s=8, d=16):
    return [jnp.asarray(rng.standard_normal((1, s, h, d)), jnp.float32) for h in (2, 2, 2)]


def test_unsupported_arguments_are_refused_by_name(rng):
    q, k, v = small(rng)
    for kw, name in ((dict(mask_builder=lambda *a: None), "mask_builder"), (dict(chunk_size=4), "chunk_size"),
                     (dict(cfg=object()), "cfg")):
        with pytest.raises(NotImplementedError, match=f"ring_attention: {name} is not supported"):
            jax.block_until_ready(ring_attention(q, k, v, **kw))
    from ejk.types import MaskInfo
    with pytest.raises(NotImplementedError, match="mask_info: only segment ids"):
        jax.block_until_ready(ring_attention(q, k, v, mask_info=MaskInfo.from_segments(jnp.zeros((1, 8), jnp.int32)).apply_causal()))


def test_bad_arguments_name_what_was_expected(rng):
    from ejk.types import MaskInfo
    q, k, v = small(rng, s=6)
    with pytest.raises(ValueError, match="zigzag_ring_attention: query: the local sequence length must be even"):
        jax.block_until_ready(zigzag_ring_attention(q[:, :5], k[:, :5], v[:, :5]))
    with pytest.raises(ValueError, match="ring_attention: query: expected \\[B, S, H, D\\]"):
        jax.block_until_ready(ring_attention(q[0], k, v))
    with pytest.raises(ValueError, match="sliding_window: expected bounds >= 0"):
        jax.block_until_ready(ring_attention(q, k, v, sliding_window=(-1, 2)))
    mesh = Mesh(np.array(jax.devices()[:1]), ("sp",))
    spec = P(None, "sp")
    with pytest.raises(ValueError, match="axis_name: expected the mesh axis that splits the sequence"):
        jax.block_until_ready(ring_attention(q, k, v, axis_name="x", mesh=mesh, in_specs=(spec,) * 3 + (None, None), out_specs=spec))
    with pytest.raises(ValueError, match="in_specs: expected 5 PartitionSpecs"):
        jax.block_until_ready(ring_attention(q, k, v, axis_name="sp", mesh=mesh, in_specs=(spec,) * 6, out_specs=spec))
    with pytest.raises(ValueError, match=r"in_specs\[1\] \(key\): expected the sequence axis"):
        jax.block_until_ready(ring_attention(q, k, v, axis_name="sp", mesh=mesh, in_specs=(spec, P(), spec, None, None), out_specs=spec))
    bias = jnp.asarray(rng.standard_normal((1, 2, 6, 6)), jnp.float32)
    with pytest.raises(ValueError, match=r"in_specs\[4\] \(bias\): expected its key axis \(axis 3\) whole"):
        jax.block_until_ready(ring_attention(q, k, v, None, bias, axis_name="sp", mesh=mesh,
                                             in_specs=(spec,) * 3 + (None, P(None, None, None, "sp")), out_specs=spec))
    with pytest.raises(ValueError, match=r"bias: expected \[B\|1, Hq\|1, Sq, N Sk\].*got \(1, 2, 6, 5\)"):
        jax.block_until_ready(ring_attention(q, k, v, None, bias[..., :5]))
    ids = jnp.zeros((1, 6), jnp.int32)
    with pytest.raises(ValueError, match="q_segment_ids, kv_segment_ids: expected both or neither"):
        jax.block_until_ready(ring_attention(q, k, v, q_segment_ids=ids))
    with pytest.raises(ValueError, match="kv_segment_ids: expected \\[1, 6\\]"):
        jax.block_until_ready(ring_attention(q, k, v, q_segment_ids=ids, kv_segment_ids=ids[:, :4]))
    with pytest.raises(ValueError, match="q_segment_ids: expected int32, got float32"):
        jax.block_until_ready(ring_attention(q, k, v, q_segment_ids=ids * 1.0, kv_segment_ids=ids))
    with pytest.raises(ValueError, match="not with mask_info"):
        jax.block_until_ready(ring_attention(q, k, v, q_segment_ids=ids, kv_segment_ids=ids,
                                             mask_info=MaskInfo.from_segments(ids)))
    with pytest.raises(NotImplementedError, match="not with mesh/in_specs/out_specs"):
        jax.block_until_ready(ring_attention(q, k, v, q_segment_ids=ids, kv_segment_ids=ids, axis_name="sp",
                                             mesh=mesh, in_specs=(spec,) * 3 + (None, None), out_specs=spec))
    with pytest.raises(ValueError, match="out_specs: expected"):
        jax.block_until_ready(ring_attention(q, k, v, axis_name="sp", mesh=mesh, in_specs=(spec,) * 3 + (None, None), out_specs=P()))


def _primitives(jaxpr):
    """The primitives a program runs, nested programs included, as counts by name (custom_vjp
    wrappers, which run nothing themselves, left out)."""
    import collections
    counts = collections.Counter(e.primitive.name for e in jaxpr.eqns if e.primitive.name != "custom_vjp_call")
    for e in jaxpr.eqns:
        for sub in _subjaxprs(e):
            counts += _primitives(sub)
    return counts


@pytest.mark.parametrize("with_bias", [False, True])
def test_one_device_is_flash_attention(rng, with_bias):
    """A ring of one is one flash_attention call: the same bits, and no work in the program
    beyond flash_attention's (no zero fill, float32 copy, slice or merge), forward and backward,
    with a bias too (its gradient included)."""
    from ejk.jax import flash_attention
    q, k, v = small(rng)
    x = [q, k, v] + ([jnp.asarray(rng.standard_normal((1, 2, 8, 8)), jnp.float32)] if with_bias else [])
    opts = dict(causal=True, sliding_window=(3, 1))
    ring = lambda q, k, v, *b: ring_attention(q, k, v, None, *b, **opts)  # noqa: E731
    flash = lambda q, k, v, *b: flash_attention(q, k, v, *b, **opts)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(jax.jit(ring)(*x)), np.asarray(flash(*x)))
    for f in (lambda g: g, lambda g: jax.grad(lambda *a: g(*a).sum(), argnums=tuple(range(len(x))))):
        got, want = (_primitives(jax.make_jaxpr(f(g))(*x).jaxpr) for g in (ring, flash))
        assert got["ffi_call"] == want["ffi_call"] >= 1
        assert not got - want, got - want


# --- the ring on virtual devices -----------------------------------------------------------------

# name: (devices, layout, dtype, options, sinks shape, head_dim, where)
CASES = {
    "plain_full_4": (4, "plain", "float32", {}, None, 16, "mesh"),
    "plain_causal_4": (4, "plain", "float32", dict(causal=True), None, 16, "mesh"),
    "plain_causal_window_3": (3, "plain", "float32", dict(causal=True, sliding_window=(5, 0)), None, 16, "mesh"),
    "plain_window_softcap_4": (4, "plain", "float32", dict(sliding_window=(9, 3), logits_soft_cap=2.5,
                                                           softmax_scale=0.2), None, 12, "mesh"),
    "plain_causal_sinks_8": (8, "plain", "float32", dict(causal=True), (4, 2), 16, "mesh"),
    "plain_causal_bf16_4": (4, "plain", "bfloat16", dict(causal=True), None, 16, "mesh"),
    "zigzag_causal_4": (4, "zigzag", "float32", dict(causal=True), None, 16, "mesh"),
    "zigzag_causal_window_sinks_3": (3, "zigzag", "float32", dict(causal=True, sliding_window=(6, 0)), (3,), 16,
                                     "mesh"),
    "zigzag_window_4": (4, "zigzag", "float32", dict(sliding_window=(7, 2)), None, 16, "mesh"),
    "zigzag_causal_sinks_checked_2": (2, "zigzag", "float32", dict(causal=True), (4, 1), 16, "shard_map"),
    "plain_window_checked_3": (3, "plain", "float32", dict(causal=True, sliding_window=(4, 0)), None, 16,
                               "shard_map"),
    "zigzag_causal_batch_sharded_2x2": (2, "zigzag", "float32", dict(causal=True), (4, 2), 16, "mesh2d"),
    "plain_causal_window_longer_keys_3": (3, "plain", "float32", dict(causal=True, sliding_window=(10, 0)), None,
                                          16, "mesh"),
    "zigzag_window_longer_keys_2": (2, "zigzag", "float32", dict(sliding_window=(3, 5)), None, 16, "mesh"),
    # mask_info's segment ids, inside a caller's shard_map (their shards travel with key and value)
    "plain_causal_segments_3": (3, "plain", "float32", dict(causal=True), None, 16, "segments"),
    "zigzag_causal_segments_sinks_2": (2, "zigzag", "float32", dict(causal=True), (4, 2), 16, "segments"),
    "plain_window_segments_bf16_4": (4, "plain", "bfloat16", dict(sliding_window=(6, 2)), None, 16, "segments"),
    # a bias (BIAS gives its shape), under our shard_map or a caller's
    "plain_causal_bias_3": (3, "plain", "float32", dict(causal=True), None, 16, "mesh"),
    "plain_full_bias_every_row_2": (2, "plain", "float32", {}, (4, 2), 16, "mesh"),
    "zigzag_causal_bias_4": (4, "zigzag", "float32", dict(causal=True), None, 12, "mesh"),
    # with q_segment_ids / kv_segment_ids given as they are, inside a caller's shard_map
    "zigzag_window_softcap_bias_ids_3": (3, "zigzag", "float32", dict(sliding_window=(6, 4), logits_soft_cap=3.0),
                                         None, 16, "ids"),
    "zigzag_causal_bias_every_row_bf16_2": (2, "zigzag", "bfloat16", dict(causal=True), None, 16, "shard_map"),
}
LOCAL, B, HQ, HKV = 8, 2, 4, 2
LOCAL_KEYS = {"plain_causal_window_longer_keys_3": 12, "zigzag_window_longer_keys_2": 12,
              "plain_causal_bias_3": 12}  # else LOCAL
# name: (bias's batch and head sizes, its rows: "local" (the device's, sharded) or "ring" (all, replicated))
BIAS = {"plain_causal_bias_3": ((B, HQ), "local"), "plain_full_bias_every_row_2": ((1, HQ), "ring"),
        "zigzag_causal_bias_4": ((1, HQ), "local"), "zigzag_window_softcap_bias_ids_3": ((B, 1), "local"),
        "zigzag_causal_bias_every_row_bf16_2": ((1, 1), "ring")}


def zigzag_order(n, length):
    c = length // (2 * n)
    return np.concatenate([np.r_[i * c:(i + 1) * c, (2 * n - 1 - i) * c:(2 * n - i) * c] for i in range(n)])


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if np.isnan(got).any():
        return math.inf
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def segment_ids(rng, length):
    """[B, length] ids in runs of random length, the second row's last 3 positions padding (-1)."""
    ids = np.sort(rng.integers(0, 3, (B, length)), axis=1).astype(np.int32)
    ids[1, -3:] = -1
    return ids


def run_case(name):
    """Errors (relative L2) of a case's output and gradients against the float64 reference and
    against ejk.jax.flash_attention on the gathered sequence."""
    import flash_grad_reference as ref
    from ejk.jax import flash_attention
    from ejk.types import MaskInfo
    n, layout, dtype, opts, sinks, d, where = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    s, sk = LOCAL * n, LOCAL_KEYS.get(name, LOCAL) * n
    dt = jnp.dtype(dtype)
    x = [jnp.asarray(rng.standard_normal((B, length, h, d)), dt) for length, h in ((s, HQ), (sk, HKV), (sk, HKV))]
    names = ["dq", "dk", "dv"]
    if sinks is not None:
        x.append(jnp.asarray(rng.standard_normal(sinks), jnp.float32))
        names.append("dsinks")
    bias_shape, bias_rows = BIAS.get(name, (None, None))
    if bias_shape is not None:  # float32 for a bfloat16 ring too: the ring casts it, the gradient comes back cast
        x.append(jnp.asarray(rng.standard_normal(bias_shape + (s, sk)), jnp.float32))
        names.append("dbias")
    w = jnp.asarray(rng.standard_normal((B, s, HQ, d)), jnp.float32)
    order = zigzag_order(n, s) if layout == "zigzag" else np.arange(s)
    key_order = zigzag_order(n, sk) if layout == "zigzag" else np.arange(sk)
    ids = (segment_ids(rng, s), segment_ids(rng, sk)) if where in ("segments", "ids") else None
    back, key_back = np.argsort(order), np.argsort(key_order)
    if where == "mesh2d":  # batch over "data" too: the ring runs within each row of the mesh
        mesh = Mesh(np.array(jax.devices()[:2 * n]).reshape(2, n), ("data", "sp"))
        seq = P("data", "sp")
    else:
        mesh = Mesh(np.array(jax.devices()[:n]), ("sp",))
        seq = P(None, "sp")
    # The bias of the device's rows is split over "sp" as the queries are; every row's is replicated.
    bias_spec = P(None, None, "sp") if bias_rows == "local" else P()
    specs = (seq, seq, seq) + ((P(),) if sinks is not None else ()) + ((bias_spec,) if bias_rows else ())
    fn = ring_attention if layout == "plain" else zigzag_ring_attention

    def split(a):  # (q, k, v), sinks or None, bias or None
        aux = a[3] if sinks is not None else None
        return a[:3], aux, a[-1] if bias_rows else None

    def ring(*a):
        if where in ("mesh", "mesh2d"):
            qkv, aux, bias = split(a)
            full_specs = (seq, seq, seq, P() if sinks is not None else None, bias_spec if bias_rows else None)
            return fn(*qkv, aux, bias, axis_name="sp", mesh=mesh, in_specs=full_specs, out_specs=seq, **opts)
        laid_ids = () if ids is None else (jnp.asarray(ids[0][:, order]), jnp.asarray(ids[1][:, key_order]))

        def body(*local):  # a caller's shard_map: the ids' shards as extra operands, in the layout's order
            qkv, aux, bias = split(local[:len(a)])
            seg = {}
            if where == "segments":
                seg = dict(mask_info=MaskInfo.from_segments(*local[len(a):]))
            elif where == "ids":
                seg = dict(zip(("q_segment_ids", "kv_segment_ids"), local[len(a):]))
            return fn(*qkv, aux, bias, axis_name="sp", **seg, **opts)
        return jax.shard_map(body, mesh=mesh, in_specs=specs + (P(None, "sp"),) * len(laid_ids), out_specs=seq,
                             check_vma=True)(*a, *laid_ids)

    def permuted(a):  # the sequences (and the bias's rows and keys) in the layout's order, the sinks as they are
        laid = [a[0][:, order], a[1][:, key_order], a[2][:, key_order]] + list(a[3:])
        if bias_rows:
            laid[-1] = laid[-1][:, :, order][..., key_order]
        return laid

    def loss(*a):
        return jnp.sum(ring(*a).astype(jnp.float32) * w[:, order])

    laid = permuted(x)
    out = jax.jit(ring)(*laid)[:, back]
    grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(x)))))(*laid)
    grads = [grads[0][:, back], grads[1][:, key_back], grads[2][:, key_back]] + list(grads[3:])
    if bias_rows:
        grads[-1] = grads[-1][:, :, back][..., key_back]

    def flash(*a):
        qkv, aux, bias = split(a)
        mask = None if ids is None else MaskInfo.from_segments(jnp.asarray(ids[0]), jnp.asarray(ids[1]))
        return flash_attention(*qkv, bias, None, None, aux, mask_info=mask, **opts)

    flash_out = flash(*x)
    flash_grads = jax.grad(lambda *a: jnp.sum(flash(*a).astype(jnp.float32) * w), argnums=tuple(range(len(x))))(*x)
    with jax.enable_x64(True):
        x64 = [jnp.asarray(np.asarray(y, np.float64)) for y in x]
        vis = ref.visible_mask(jnp, s, sk, causal=opts.get("causal", False), window=opts.get("sliding_window"),
                               q_seg=None if ids is None else ids[0], kv_seg=None if ids is None else ids[1])

        def reference(*a):
            (q, k, v), aux, bias = split(a)
            if bias is not None and dtype != "float32":  # the bias the ring sees: cast to query's dtype
                bias = bias.astype(dt).astype(jnp.float64)
            return ref.attention(jnp, q, k, v, vis, bias=bias, sinks=aux, scale=opts.get("softmax_scale"),
                                 softcap=opts.get("logits_soft_cap"))[0]
        want = reference(*x64)
        w64 = jnp.asarray(np.asarray(w, np.float64))
        want_grads = jax.grad(lambda *a: jnp.sum(reference(*a) * w64), argnums=tuple(range(len(x))))(*x64)
    errors = {against: dict(zip(["out"] + names, [rel_l2(out, o)] + [rel_l2(g, r) for g, r in zip(grads, gs)]))
              for against, o, gs in (("reference", want, want_grads), ("flash", flash_out, flash_grads))}
    return dict(errors, dtype=dtype)


def _subjaxprs(eqn):
    for p in eqn.params.values():
        for x in (p if isinstance(p, (tuple, list)) else [p]):
            if hasattr(x, "jaxpr") and hasattr(x.jaxpr, "eqns"):
                yield x.jaxpr
            elif hasattr(x, "eqns"):
                yield x


def _count(jaxpr, name):
    return sum((e.primitive.name == name) + sum(_count(j, name) for j in _subjaxprs(e)) for e in jaxpr.eqns)


def ring_structure():
    """The traced program of plain causal ring_attention on 4 devices: the ring's body in order
    (each eqn as its primitive and the kernels it holds), each lax.switch's kernels per branch,
    and the ppermutes of the forward and of forward plus backward."""
    n = 4
    mesh = Mesh(np.array(jax.devices()[:n]), ("sp",))
    seq = P(None, "sp")
    q = jnp.zeros((1, LOCAL * n, 2, 16), jnp.float32)

    def f(q):
        return ring_attention(q, q, q, causal=True, axis_name="sp", mesh=mesh, in_specs=(seq,) * 3 + (None, None),
                              out_specs=seq)
    forward = jax.make_jaxpr(f)(q).jaxpr
    both = jax.make_jaxpr(jax.grad(lambda q: f(q).sum()))(q).jaxpr
    (body,) = [j for e in forward.eqns if e.primitive.name == "shard_map" for j in _subjaxprs(e)]
    (ring,) = [j for e in body.eqns if e.primitive.name == "custom_vjp_call" for j in _subjaxprs(e)]
    order = [(e.primitive.name, _count_in(e, "ffi_call")) for e in ring.eqns
             if e.primitive.name in ("ppermute", "cond") or _count_in(e, "ffi_call")]
    branches = [[_count(b.jaxpr, "ffi_call") for b in e.params["branches"]] for e in ring.eqns
                if e.primitive.name == "cond"]
    return {"order": order, "branches": branches, "forward_ppermutes": _count(forward, "ppermute"),
            "all_ppermutes": _count(both, "ppermute")}


def _count_in(eqn, name):
    return (eqn.primitive.name == name) + sum(_count(j, name) for j in _subjaxprs(eqn))


@pytest.fixture(scope="module")
def ring_results():
    if no_cpu_jit():
        pytest.skip(f"CPU variants outside the built-in set: {no_cpu_jit()}")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["ejk"].__file__)))
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
                                     f"--xla_force_host_platform_device_count={DEVICES}".strip(),
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.path.dirname(__file__),
                                                        os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_ring_equals_attention_on_the_gathered_sequence(ring_results, name):
    assert_within(name, ring_results[name])


def test_the_next_shard_is_sent_before_each_step_and_masked_blocks_run_nothing(ring_results):
    s = ring_results["structure"]
    n = 4
    kinds = [name for name, _ in s["order"]]
    # Runs of the body: the next shard's two ppermutes, then a step's kernels (step 0 plain, as
    # every device computes its diagonal; later steps a switch), ..., the last step sending nothing.
    runs = [(k, len(list(g))) for k, g in itertools.groupby(kinds, lambda k: k if k == "ppermute" else "kernels")]
    assert [k for k, _ in runs] == ["ppermute", "kernels"] * (n - 1), kinds
    assert all(count == 2 for k, count in runs if k == "ppermute"), kinds
    assert kinds.count("cond") == n - 1 and "cond" not in kinds[:kinds.index("ppermute", 2)], kinds
    # Every later step: devices whose block is fully masked take a branch with no kernel.
    assert len(s["branches"]) == n - 1
    for counts in s["branches"]:
        assert sorted(counts)[0] == 0 and max(counts) > 0, counts
    assert s["forward_ppermutes"] == 2 * (n - 1)
    # Backward: K/V again (2 (n - 1)) and dK/dV one hop per step (2 n).
    assert s["all_ppermutes"] == 2 * (n - 1) * 2 + 2 * n


if __name__ == "__main__":
    assert len(jax.devices()) == DEVICES, jax.devices()
    results = {name: run_case(name) for name in CASES}
    results["structure"] = ring_structure()
    print(json.dumps(results))
