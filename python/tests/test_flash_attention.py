"""flash_attention under jax.jit against the float64 reference: masks, soft-capping, sinks, GQA,
bias, segment ids, packed varlen, dtypes, head_dims outside the built-in set (JIT) and outside the
kernels' tiling (padded), the seed's call form and the dtypes it casts."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reference
from conftest import assert_close
from ejk.jax import flash_attention, flash_attention_with_lse

STATIC = ("softmax_scale", "causal", "sliding_window", "logits_soft_cap", "normalize_output")


def qkv(rng, b=2, sq=70, sk=90, hq=4, hkv=2, d=64, dtype=jnp.float32):
    shapes = [(b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)]
    return [jnp.asarray(rng.standard_normal(s), dtype) for s in shapes]


def run_jit(*args, **opts):
    return jax.jit(flash_attention_with_lse, static_argnames=STATIC)(*args, **opts)


CASES = {
    "plain": {},
    "causal": dict(causal=True),
    "window": dict(sliding_window=(16, 8)),
    "window_int": dict(sliding_window=12),
    "causal_window_softcap": dict(causal=True, sliding_window=(20, 0), logits_soft_cap=5.0),
    "scale_unnormalized": dict(softmax_scale=0.3, normalize_output=False),
}


@pytest.mark.parametrize("name", CASES)
def test_masks_and_logits(rng, name):
    q, k, v = qkv(rng)
    out, lse = run_jit(q, k, v, **CASES[name])
    ref_out, ref_lse = reference.flash_attention(q, k, v, **CASES[name])
    assert_close(out, ref_out)
    assert_close(lse, ref_lse)


@pytest.mark.parametrize("per_head", [False, True], ids=["sinks_shared", "sinks_per_head"])
def test_sinks(rng, per_head):
    q, k, v = qkv(rng, hq=4, hkv=1)  # MQA too
    sinks = jnp.asarray(rng.standard_normal((4, 3) if per_head else (3,)), jnp.float32)
    out, lse = run_jit(q, k, v, None, None, None, sinks, causal=True)
    ref_out, ref_lse = reference.flash_attention(q, k, v, softmax_aux=sinks, causal=True)
    assert_close(out, ref_out)
    assert_close(lse, ref_lse)


def test_bias_and_segments(rng):
    q, k, v = qkv(rng, sq=64, sk=64)
    bias = jnp.asarray(rng.standard_normal((1, 4, 64, 64)), jnp.float32)
    seg = jnp.asarray(np.repeat([[0, 1, 1, -1]], 16, axis=1).repeat(2, axis=0), jnp.int32)
    out, lse = run_jit(q, k, v, bias, q_segment_ids=seg, kv_segment_ids=seg)
    ref_out, ref_lse = reference.flash_attention(q, k, v, bias=bias, q_segment_ids=seg, kv_segment_ids=seg)
    assert_close(out, ref_out)
    assert_close(lse, ref_lse)


def test_varlen(rng):
    cu_q, cu_k = np.array([0, 17, 17, 60], np.int32), np.array([0, 30, 41, 100], np.int32)
    q = jnp.asarray(rng.standard_normal((60, 4, 64)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((100, 2, 64)), jnp.float32) for _ in range(2))
    out, lse = run_jit(q, k, v, None, jnp.asarray(cu_q), jnp.asarray(cu_k), causal=True,
                       logits_soft_cap=10.0)
    ref_out, ref_lse = reference.flash_attention(q, k, v, cum_seqlens_q=cu_q, cum_seqlens_k=cu_k, causal=True,
                                                 logits_soft_cap=10.0)
    assert_close(out, ref_out)
    assert_close(lse, ref_lse)


def test_bfloat16(rng):
    q, k, v = qkv(rng, dtype=jnp.bfloat16, d=128)
    out = jax.jit(flash_attention, static_argnames=STATIC)(q, k, v, causal=True)
    assert out.dtype == jnp.bfloat16
    assert_close(out, reference.flash_attention(q, k, v, causal=True)[0], "bfloat16")


def test_new_head_dim_compiles(rng):
    q, k, v = qkv(rng, d=80, hq=2, hkv=2)
    out = jax.jit(flash_attention, static_argnames=STATIC)(q, k, v, sliding_window=(32, 32))
    assert_close(out, reference.flash_attention(q, k, v, sliding_window=(32, 32))[0])


def test_seed_call_form(rng):
    """Positional tensors, keyword options and the defaults of ejkernel.modules.flash_attention."""
    q, k, v = qkv(rng)
    out = flash_attention(q, k, v, None, None, None, None, None, mask_info=None, softmax_scale=None,
                          dropout_prob=0.0, causal=False, dropout_seed=None, sliding_window=None, logits_soft_cap=None,
                          normalize_output=True, precision=jax.lax.Precision.DEFAULT, logits_dtype=jnp.float32,
                          platform="xla", cfg=None, mesh=None, in_specs=None, out_specs=None)
    assert out.shape == q.shape
    assert_close(out, reference.flash_attention(q, k, v)[0])
    # Any precision and a float logits_dtype: the kernel is at least that precise.
    out = flash_attention(q, k, v, precision=jax.lax.Precision.HIGHEST, logits_dtype=jnp.bfloat16)
    assert_close(out, reference.flash_attention(q, k, v)[0])


def test_seed_casts(rng):
    """Sinks of any float dtype become float32, a bias of another float dtype query's, as the seed casts them."""
    q, k, v = qkv(rng, sq=32, sk=32, dtype=jnp.bfloat16)
    sinks = jnp.asarray(rng.standard_normal((4, 2)), jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal((1, 4, 32, 32)), jnp.float32)
    out = jax.jit(flash_attention)(q, k, v, bias, None, None, sinks)
    want = reference.flash_attention(q, k, v, bias=np.asarray(bias.astype(jnp.bfloat16), np.float64),
                                     softmax_aux=np.asarray(sinks, np.float64))[0]
    assert_close(out, want, "bfloat16")


@pytest.mark.parametrize("d", [33, 4])
def test_head_dim_padded(rng, d):
    """A head_dim the kernels do not tile runs, zero-padded (the scale is still 1/sqrt(d))."""
    q, k, v = qkv(rng, sq=20, sk=24, d=d)
    out = jax.jit(flash_attention, static_argnames=STATIC)(q, k, v, causal=True)
    assert out.shape == q.shape
    assert_close(out, reference.flash_attention(q, k, v, causal=True)[0])


@pytest.mark.parametrize("platform", ["cpu", "auto", None, "xla"])
def test_platform_names(rng, platform):
    q, k, v = qkv(rng, sq=8, sk=8)
    assert_close(flash_attention(q, k, v, platform=platform), reference.flash_attention(q, k, v)[0])


@pytest.mark.parametrize("platform, error, match", [
    ("triton", ValueError, r"^platform: 'cuda' was asked for, but flash_attention runs on cpu here"),
    ("cuda", ValueError, r"^platform: 'cuda' was asked for"),
    ("pallas", NotImplementedError, r"^platform: 'pallas' .* it has 'auto', 'cpu' and 'cuda'"),
    ("tpu", ValueError, r"^platform: expected None, 'auto', 'cpu' or 'cuda'"),
])
def test_platform_refused(rng, platform, error, match):
    q, k, v = qkv(rng, sq=8, sk=8)
    with pytest.raises(error, match=match):
        jax.block_until_ready(flash_attention(q, k, v, platform=platform))


@pytest.mark.parametrize("kwargs, match", [
    (dict(logits_dtype=jnp.int32), r"^logits_dtype: expected a floating dtype"),
    (dict(precision="sideways"), r"^precision: expected a jax.lax.Precision"),
])
def test_refused_by_name(rng, kwargs, match):
    q, k, v = qkv(rng, sq=8, sk=8)
    with pytest.raises((NotImplementedError, ValueError), match=match):
        jax.block_until_ready(flash_attention(q, k, v, **kwargs))


def test_block_tables_read_paged_caches(rng):
    """Keys and values in shuffled pages of 16 (the last pages unused) against the dense arrays
    they hold, output and gradients (the gradient lands in the pages)."""
    b, blocks, size = 2, 5, 16
    q, k, v = qkv(rng, b=b, sq=40, sk=blocks * size, hq=4, hkv=2, d=64)
    perm = rng.permutation(b * blocks + 3)[:b * blocks]
    tables = jnp.asarray(perm.reshape(b, blocks), jnp.int32)
    def paged(x):
        cache = jnp.asarray(rng.standard_normal((b * blocks + 3, size) + x.shape[2:]), x.dtype)
        return cache.at[tables.reshape(-1)].set(x.reshape(b * blocks, size, *x.shape[2:]))
    kc, vc = paged(k), paged(v)
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)
    def loss(f, q, k, v, *extra):
        return jnp.sum(f(q, k, v, *extra) * w)
    paged_call = lambda q, kc, vc: flash_attention(q, kc, vc, None, None, None, None, tables, causal=True)  # noqa: E731
    dense_call = lambda q, k, v: flash_attention(q, k, v, causal=True)  # noqa: E731
    assert_close(jax.jit(paged_call)(q, kc, vc), reference.flash_attention(q, k, v, causal=True)[0])
    gq, gk, gv = jax.grad(lambda *a: loss(paged_call, *a), argnums=(0, 1, 2))(q, kc, vc)
    dq, dk, dv = jax.grad(lambda *a: loss(dense_call, *a), argnums=(0, 1, 2))(q, k, v)
    np.testing.assert_array_equal(np.asarray(gq), np.asarray(dq))
    for got, want in ((gk, dk), (gv, dv)):
        pages = np.asarray(got)
        np.testing.assert_array_equal(pages[np.asarray(perm)].reshape(want.shape), np.asarray(want))
        unused = np.setdiff1d(np.arange(pages.shape[0]), perm)
        assert not pages[unused].any()


def test_block_tables_bad_arguments_are_named(rng):
    q, k, v = qkv(rng, sq=8, sk=8)
    tables = jnp.zeros((2, 1), jnp.int32)
    with pytest.raises(ValueError, match=r"^key: with block_tables, expected a paged cache"):
        jax.block_until_ready(flash_attention(q, k[0], v[0], None, None, None, None, tables))
    with pytest.raises(ValueError, match=r"^block_tables: expected int32 \[B, max_blocks\], got float32"):
        jax.block_until_ready(flash_attention(q, k, v, None, None, None, None, jnp.zeros((2, 1))))
    cum = jnp.asarray([0, 8], jnp.int32)
    with pytest.raises(ValueError, match=r"^block_tables: paged K/V does not take varlen"):
        jax.block_until_ready(flash_attention(q[0], k, v, None, cum, cum, None, tables))
