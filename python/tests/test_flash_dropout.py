"""Dropout in ejk.jax.flash_attention (CPU): an independent numpy Philox 4x32-10 checked against
Random123's known answers; the keep mask read back from the op (V = identity rows) bit for bit
against it for two block configs; the keep rate within 4 sigma of 1 - p; out and every gradient
(jax.grad through the custom VJP, the same seed in the backward) against JAX's float64 autodiff of
the reference with the same mask, with GQA, causal, window, soft cap, sinks, bias, varlen, bf16;
p = 0 as no dropout; two backward runs bit-identical; a bad dropout_prob named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flash_grad_reference as ref
import philox_reference as philox
from ejk.jax import flash_attention
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

NAMES = ("q", "k", "v", "bias", "softmax_aux")


@pytest.mark.parametrize("counter, key, want", philox.KNOWN_ANSWERS)
def test_numpy_philox_matches_the_known_answers(counter, key, want):
    got = philox.philox4x32_10([np.uint32(c) for c in counter], key)
    assert [int(w) for w in got] == list(want)


def identity_values(b, sk, hkv, d):
    """v[b, j, h] = e_j (sk <= d): out[b, i, h, j] is the weight of key j."""
    v = np.zeros((b, sk, hkv, d), np.float32)
    v[:, np.arange(sk), :, np.arange(sk)] = 1.0
    return jnp.asarray(v)


@pytest.mark.parametrize("cfg", [dict(block_q=32, block_k=64), dict(block_q=64, block_k=128)])
def test_keep_mask_is_philox_bit_for_bit(rng, cfg):
    b, s, hq, hkv, d, p, seed = 2, 80, 4, 2, 96, 0.3, 2 ** 63 + 12345
    q = jnp.asarray(0.1 * rng.standard_normal((b, s, hq, d)), jnp.float32)  # small logits: every P > 0
    k = jnp.asarray(0.1 * rng.standard_normal((b, s, hkv, d)), jnp.float32)
    v = identity_values(b, s, hkv, d)
    plain = np.asarray(flash_attention(q, k, v, causal=True, cfg=cfg))[..., :s]  # [b, i, h, j] = P_ij
    out = np.asarray(flash_attention(q, k, v, causal=True, dropout_prob=p, dropout_seed=seed, cfg=cfg))[..., :s]
    keep = philox.keep_mask(seed, p, b, hq, s, s).transpose(0, 2, 1, 3)  # [b, i, h, j]
    visible = np.tril(np.ones((s, s), bool))[None, :, None, :]
    assert np.array_equal(out != 0, keep & visible)
    want = plain * keep * philox.threshold_and_scale(p)[1]
    assert_rel_l2(out, want)


def test_keep_rate_within_4_sigma(rng):
    b, s, h, d, p = 2, 128, 8, 128, 0.25
    q = jnp.asarray(0.1 * rng.standard_normal((b, s, h, d)), jnp.float32)
    out = np.asarray(flash_attention(q, q, identity_values(b, s, h, d), dropout_prob=p, dropout_seed=9))
    n = out.size
    rate = np.count_nonzero(out) / n
    assert abs(rate - (1 - p)) <= 4 * np.sqrt(p * (1 - p) / n), rate


def operands(rng, b=2, sq=19, sk=23, hq=4, hkv=2, d=32, bias=None, sinks=None, dtype=jnp.float32):
    def randn(*shape, dt=dtype):
        return jnp.asarray(rng.standard_normal(shape), dt)
    x = dict(q=randn(b, sq, hq, d), k=randn(b, sk, hkv, d), v=randn(b, sk, hkv, d))
    if bias is not None:
        x["bias"] = randn(*bias)
    if sinks is not None:
        x["softmax_aux"] = randn(*sinks, dt=jnp.float32)
    return x


def check(rng, x, p, seed, causal=False, sliding_window=None, logits_soft_cap=None, dtype_name="float32"):
    names = [n for n in NAMES if n in x]
    b, sq, hq, d = x["q"].shape
    sk = x["k"].shape[1]
    w = jnp.asarray(rng.standard_normal((b, sq, hq, d)), jnp.float32)
    kw = dict(causal=causal, sliding_window=sliding_window, logits_soft_cap=logits_soft_cap, dropout_prob=p,
              dropout_seed=seed)

    def loss(*args):
        a = dict(zip(names, args))
        out = flash_attention(a["q"], a["k"], a["v"], a.get("bias"), None, None, a.get("softmax_aux"), **kw)
        return jnp.sum(out.astype(jnp.float32) * w), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(names))), has_aux=True))(
        *(x[n] for n in names))
    window = (sliding_window, sliding_window) if isinstance(sliding_window, int) else sliding_window
    with jax.enable_x64(True):
        vis = ref.visible_mask(jnp, sq, sk, causal, window)
        drop = jnp.asarray(philox.drop_factors(seed, p, b, hq, sq, sk))

        def ref_loss(*args):
            a = dict(zip(names, args))
            o, _ = ref.attention(jnp, a["q"], a["k"], a["v"], vis, a.get("bias"), a.get("softmax_aux"), None,
                                 logits_soft_cap, drop)
            return jnp.sum(o * jnp.asarray(np.asarray(w, np.float64))), o

        x64 = [jnp.asarray(np.asarray(x[n], np.float64)) for n in names]
        (_, want_out), want = jax.value_and_grad(ref_loss, argnums=tuple(range(len(names))), has_aux=True)(*x64)
    assert_rel_l2(np.asarray(out, np.float64), np.asarray(want_out), dtype_name=dtype_name)
    for n, g, e in zip(names, grads, want):
        assert g.shape == x[n].shape, n
        assert_rel_l2(np.asarray(g, np.float64), np.asarray(e), dtype_name=dtype_name)


def test_gqa(rng):
    check(rng, operands(rng), 0.3, 1)


def test_causal_sinks_softcap(rng):
    check(rng, operands(rng, sinks=(4, 2)), 0.5, -77, causal=True, logits_soft_cap=3.0)


def test_window_bias_broadcast(rng):
    check(rng, operands(rng, bias=(1, 4, 19, 23)), 0.2, 2 ** 40, sliding_window=(5, 2))


def test_bfloat16(rng):
    check(rng, operands(rng, d=64, bias=(2, 4, 19, 23), dtype=jnp.bfloat16), 0.4, 3, causal=True,
          dtype_name="bfloat16")


def test_varlen(rng):
    """Packed sequences: each pair's mask at its sequence's index and positions within it."""
    cq, ck = np.array([0, 7, 7, 20], np.int32), np.array([0, 9, 12, 25], np.int32)
    q = jnp.asarray(rng.standard_normal((20, 4, 16)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((25, 2, 16)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((25, 2, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((20, 4, 16)), jnp.float32)
    p, seed = 0.35, 21

    def loss(q, k, v):
        out = flash_attention(q, k, v, None, jnp.asarray(cq), jnp.asarray(ck), causal=True, dropout_prob=p,
                              dropout_seed=seed)
        return jnp.sum(out * w), out
    (_, out), got = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    with jax.enable_x64(True):
        vis = ref.visible_mask(jnp, 20, 25, causal=True, cum_q=cq, cum_k=ck)
        drop = jnp.asarray(philox.packed_drop_factors(seed, p, 4, cq, ck))

        def rl(q, k, v):
            o, _ = ref.attention(jnp, q[None], k[None], v[None], vis, drop=drop)
            return jnp.sum(o[0] * jnp.asarray(np.asarray(w, np.float64))), o[0]
        (_, want_out), want = jax.value_and_grad(rl, argnums=(0, 1, 2), has_aux=True)(
            *(jnp.asarray(np.asarray(a, np.float64)) for a in (q, k, v)))
    assert_rel_l2(np.asarray(out, np.float64), np.asarray(want_out))
    for g, e in zip(got, want):
        assert_rel_l2(np.asarray(g, np.float64), np.asarray(e))


def test_zero_probability_is_no_dropout(rng):
    x = operands(rng)
    plain = flash_attention(x["q"], x["k"], x["v"], causal=True)
    zero = flash_attention(x["q"], x["k"], x["v"], causal=True, dropout_prob=0.0, dropout_seed=5)
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(zero))


def test_backward_is_bit_identical_across_runs(rng):
    x = operands(rng, b=2, sq=70, sk=70, hq=8, hkv=2, d=64)
    f = jax.jit(jax.grad(lambda q, k, v: jnp.sum(flash_attention(q, k, v, causal=True, dropout_prob=0.2,
                                                                   dropout_seed=4) ** 2), argnums=(0, 1, 2)))
    a, b = f(x["q"], x["k"], x["v"]), f(x["q"], x["k"], x["v"])
    for u, w in zip(a, b):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(w))


def test_seed_changes_the_mask(rng):
    x = operands(rng)
    a = flash_attention(x["q"], x["k"], x["v"], dropout_prob=0.5, dropout_seed=1)
    b = flash_attention(x["q"], x["k"], x["v"], dropout_prob=0.5, dropout_seed=2)
    c = flash_attention(x["q"], x["k"], x["v"], dropout_prob=0.5, dropout_seed=1)
    assert not np.array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


@pytest.mark.parametrize("kwargs, error", [
    (dict(dropout_prob=-0.1), ValueError), (dict(dropout_prob=1.0), ValueError),
    (dict(dropout_prob=float("nan")), ValueError), (dict(dropout_prob="0.5"), TypeError),
    (dict(dropout_prob=0.5, dropout_seed=2 ** 64), ValueError), (dict(dropout_prob=0.5, dropout_seed=1.5), ValueError),
])
def test_bad_dropout_arguments_named(rng, kwargs, error):
    x = operands(rng)
    with pytest.raises(error, match="dropout_(prob|seed)"):
        flash_attention(x["q"], x["k"], x["v"], **kwargs)
