"""jax.grad through ejk.jax.flash_attention (its custom VJP calls flash_attention_backward with the
saved out and lse) against JAX's float64 autodiff of flash_grad_reference.attention: q, k, v,
bias (broadcast dims summed) and sinks, with causal, sliding window, soft cap, segment ids, GQA,
packed varlen, a loss through lse, bfloat16, under jit, vmap of grad."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flash_grad_reference as ref
from ejk.jax import flash_attention, flash_attention_with_lse
from torch_support import assert_rel_l2, no_cpu_jit

# Feature variants (forward and backward) are compiled on first use.
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

NAMES = ("q", "k", "v", "bias", "softmax_aux")


def operands(rng, b=2, sq=19, sk=23, hq=4, hkv=2, d=32, bias=None, sinks=None, dtype=jnp.float32):
    def randn(*shape, dt=dtype):
        return jnp.asarray(rng.standard_normal(shape), dt)
    x = dict(q=randn(b, sq, hq, d), k=randn(b, sk, hkv, d), v=randn(b, sk, hkv, d))
    if bias is not None:
        x["bias"] = randn(*bias)
    if sinks is not None:
        x["softmax_aux"] = randn(*sinks, dt=jnp.float32)
    return x


def ejk_loss(x, w, seg=None, with_lse=False, **opts):
    """sum(out * w) (+ sum(lse * w_lse)) through ejk.jax.flash_attention."""
    def f(*args):
        a = dict(zip([n for n in NAMES if n in x], args))
        qs, ks = seg if seg is not None else (None, None)
        res = flash_attention_with_lse(a["q"], a["k"], a["v"], a.get("bias"), None, None, a.get("softmax_aux"),
                                       q_segment_ids=qs, kv_segment_ids=ks, **opts)
        if with_lse:
            return jnp.sum(res[0].astype(jnp.float32) * w[0]) + jnp.sum(jnp.where(jnp.isfinite(res[1]), res[1] * w[1], 0))
        return jnp.sum(res[0].astype(jnp.float32) * w[0])
    return f


def ref_loss(x, w, visible, with_lse=False, softmax_scale=None, logits_soft_cap=None):
    def f(*args):
        a = dict(zip([n for n in NAMES if n in x], args))
        out, lse = ref.attention(jnp, a["q"], a["k"], a["v"], visible, a.get("bias"), a.get("softmax_aux"),
                                 softmax_scale, logits_soft_cap)
        loss = jnp.sum(out * w[0])
        if with_lse:
            loss = loss + jnp.sum(jnp.where(jnp.isfinite(lse), lse * w[1], 0))
        return loss
    return f


def check(rng, x, seg=None, causal=False, sliding_window=None, with_lse=False, dtype_name="float32", **opts):
    names = [n for n in NAMES if n in x]
    b, sq, hq = x["q"].shape[:3]
    sk = x["k"].shape[1]
    w = (jnp.asarray(rng.standard_normal((b, sq, hq, x["q"].shape[3])), jnp.float32),
         jnp.asarray(rng.standard_normal((b, hq, sq)), jnp.float32))
    kw = dict(causal=causal, sliding_window=sliding_window, **opts)
    got = jax.jit(jax.grad(ejk_loss(x, w, seg, with_lse, **kw), argnums=tuple(range(len(names)))))(
        *(x[n] for n in names))
    window = (sliding_window, sliding_window) if isinstance(sliding_window, int) else sliding_window
    with jax.enable_x64(True):
        vis = ref.visible_mask(jnp, sq, sk, causal, window, *(seg if seg is not None else (None, None)))
        x64 = [jnp.asarray(np.asarray(x[n], np.float64)) for n in names]
        w64 = tuple(jnp.asarray(np.asarray(a, np.float64)) for a in w)
        want = jax.grad(ref_loss(x, w64, vis, with_lse, **opts), argnums=tuple(range(len(names))))(*x64)
    for n, g, e in zip(names, got, want):
        assert g.shape == x[n].shape, n
        assert_rel_l2(np.asarray(g, np.float64), np.asarray(e), dtype_name=dtype_name)


def test_plain_gqa(rng):
    check(rng, operands(rng))


def test_causal_sinks_softcap(rng):
    check(rng, operands(rng, sinks=(4, 2)), causal=True, logits_soft_cap=3.0)


def test_window_shared_sinks_bias_broadcast_over_batch(rng):
    check(rng, operands(rng, bias=(1, 4, 19, 23), sinks=(3,)), sliding_window=(5, 2))


def test_segments_bias_broadcast_over_heads_scale(rng):
    seg_q = np.repeat(np.array([[0] * 10 + [1] * 9]), 2, 0).astype(np.int32)
    seg_k = np.repeat(np.array([[0] * 12 + [1] * 11]), 2, 0).astype(np.int32)
    check(rng, operands(rng, bias=(2, 1, 19, 23)), seg=(jnp.asarray(seg_q), jnp.asarray(seg_k)), softmax_scale=0.4)


def test_loss_through_lse(rng):
    check(rng, operands(rng, sinks=(4, 1)), causal=True, with_lse=True)


def test_bfloat16(rng):
    check(rng, operands(rng, d=64, bias=(2, 4, 19, 23), dtype=jnp.bfloat16), causal=True, dtype_name="bfloat16")


def test_varlen(rng):
    """Packed sequences: the gradient of the packed tensors against the reference's mask of
    same-sequence pairs at positions within each sequence."""
    cq, ck = np.array([0, 7, 7, 20], np.int32), np.array([0, 9, 12, 25], np.int32)
    q = jnp.asarray(rng.standard_normal((20, 4, 16)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((25, 2, 16)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((25, 2, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((20, 4, 16)), jnp.float32)
    def loss(q, k, v):
        out, _ = flash_attention_with_lse(q, k, v, None, jnp.asarray(cq), jnp.asarray(ck), None, causal=True,
                                          max_seqlen_q=13, max_seqlen_k=13)
        return jnp.sum(out * w)
    got = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    with jax.enable_x64(True):
        vis = ref.visible_mask(jnp, 20, 25, causal=True, cum_q=cq, cum_k=ck)
        def rl(q, k, v):
            out, _ = ref.attention(jnp, q[None], k[None], v[None], vis)
            return jnp.sum(out[0] * jnp.asarray(np.asarray(w, np.float64)))
        want = jax.grad(rl, argnums=(0, 1, 2))(*(jnp.asarray(np.asarray(a, np.float64)) for a in (q, k, v)))
    for g, e in zip(got, want):
        assert_rel_l2(np.asarray(g, np.float64), np.asarray(e))


def test_unnormalized_output_has_no_gradient_yet(rng):
    x = operands(rng)
    with pytest.raises(Exception, match="normalize_output"):
        jax.grad(lambda q: flash_attention(q, x["k"], x["v"], normalize_output=False).sum())(x["q"])


def test_vmap_of_grad_matches_each_example(rng):
    """jax.vmap over jax.grad: the backward op maps one example at a time, bit for bit as unmapped."""
    x = operands(rng, b=2)
    stacked = {n: jnp.stack([a, a[:, ::-1] * 0.5, -a]) for n, a in x.items()}
    f = lambda q, k, v: flash_attention(q, k, v, causal=True).sum()
    got = jax.jit(jax.vmap(jax.grad(f, argnums=(0, 1, 2))))(stacked["q"], stacked["k"], stacked["v"])
    for i in range(3):
        want = jax.grad(f, argnums=(0, 1, 2))(stacked["q"][i], stacked["k"][i], stacked["v"][i])
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a[i]), np.asarray(b))
