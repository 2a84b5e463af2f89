"""ejk.jax.native_sparse_attention against a float64 dense masked implementation of the same
math (nsa_reference.py) and against the seed (ejkernel 0.0.80.3, XLA on the CPU): outputs in
float32 and bfloat16, jax.grad of every differentiable input against float64 autodiff, given
block indices with repeats (where the seed counts keys twice and we do not), and varlen equal
to a loop over the sequences."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nsa_reference as ref
import seed_oracle
from ejk.jax import native_sparse_attention
from torch_support import assert_rel_l2


def operands(rng, b=1, t=200, hq=4, hkv=2, d=64, dtype=jnp.float32):
    def randn(*shape):
        return jnp.asarray(rng.standard_normal(shape), dtype)

    def gate():
        return jnp.asarray(rng.uniform(0.2, 1.0, (b, t, hq)), dtype)

    return randn(b, t, hq, d), randn(b, t, hkv, d), randn(b, t, hkv, d), gate(), gate()


def f64(*xs):
    return [None if x is None else np.asarray(x, np.float64) for x in xs]


def expected(q, k, v, g_cmp, g_slc, idx, counts=None, scale=None):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    with jax.enable_x64(True):
        args = [None if x is None else jnp.asarray(x, jnp.float64) for x in f64(q, k, v, g_cmp, g_slc)]
        return np.asarray(ref.nsa(jnp, *args, idx, counts, scale))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [dict(t=200, hq=4, hkv=2, d=64), dict(t=130, hq=20, hkv=1, d=32),
                                   dict(b=2, t=64, hq=2, hkv=2, d=16)])
def test_full_op_matches_the_float64_reference(rng, dtype, shape):
    q, k, v, g_cmp, g_slc = operands(rng, dtype=dtype, **shape)
    out = native_sparse_attention(q, k, v, g_cmp, g_slc, None, 2)
    idx = ref.select(*f64(q, k), 1.0 / np.sqrt(q.shape[-1]), 2)
    assert_rel_l2(np.asarray(out, np.float64), expected(q, k, v, g_cmp, g_slc, idx), jnp.dtype(dtype).name)


def test_sequences_shorter_than_a_block(rng):
    q, k, v, g_cmp, g_slc = operands(rng, t=40, hq=2, hkv=1, d=16)
    out = native_sparse_attention(q, k, v, g_cmp, g_slc, None, 4)
    idx = ref.select(*f64(q, k), 0.25, 4)
    assert_rel_l2(np.asarray(out, np.float64), expected(q, k, v, g_cmp, g_slc, idx))


def test_given_block_indices_and_counts(rng):
    q, k, v, _, g_slc = operands(rng, t=150)
    r = np.random.default_rng(1)
    idx = r.integers(-1, 3, (1, 150, 2, 4)).astype(np.int32)
    counts = r.integers(0, 5, (1, 150, 2)).astype(np.int32)
    out = native_sparse_attention(q, k, v, None, g_slc, jnp.asarray(idx), jnp.asarray(counts), softmax_scale=0.2)
    assert_rel_l2(np.asarray(out, np.float64), expected(q, k, v, None, g_slc, idx, counts, 0.2))
    # An int count below the slots counts the leading slots only.
    out = native_sparse_attention(q, k, v, None, None, jnp.asarray(idx), 2)
    assert_rel_l2(np.asarray(out, np.float64), expected(q, k, v, None, None, idx[..., :2]))


def test_gradients_match_float64_autodiff(rng):
    q, k, v, g_cmp, g_slc = operands(rng, t=160, hq=4, hkv=2, d=32)
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)
    idx = ref.select(*f64(q, k), 1.0 / np.sqrt(32), 3)

    def loss(*x):
        return (native_sparse_attention(*x, None, 3) * w).sum()

    grads = jax.grad(loss, argnums=range(5))(q, k, v, g_cmp, g_slc)
    with jax.enable_x64(True):
        def loss64(*x):
            return (ref.nsa(jnp, *x, idx, None, 1.0 / np.sqrt(32)) * jnp.asarray(np.asarray(w, np.float64))).sum()

        want = jax.grad(loss64, argnums=range(5))(*[jnp.asarray(x) for x in f64(q, k, v, g_cmp, g_slc)])
        want = [np.asarray(x) for x in want]
    for name, g, e in zip(("query", "key", "value", "g_cmp", "g_slc"), grads, want):
        assert_rel_l2(np.asarray(g, np.float64), e, "float32"), name


def test_varlen_is_a_loop_over_the_sequences(rng):
    q, k, v, g_cmp, g_slc = operands(rng, t=300)
    cu = np.array([0, 130, 130, 200, 300], np.int32)
    out = native_sparse_attention(q, k, v, g_cmp, g_slc, None, 2, jnp.asarray(cu))
    pieces = [native_sparse_attention(q[:, a:e], k[:, a:e], v[:, a:e], g_cmp[:, a:e], g_slc[:, a:e], None, 2)
              for a, e in zip(cu[:-1], cu[1:]) if e > a]
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jnp.concatenate(pieces, 1)))
    grad = jax.grad(lambda k: native_sparse_attention(q, k, v, g_cmp, g_slc, None, 2, jnp.asarray(cu)).sum())(k)
    assert np.isfinite(np.asarray(grad)).all()
    with pytest.raises(ValueError, match="cu_seqlens"):
        native_sparse_attention(q, k, v, g_cmp, g_slc, None, 2, jnp.asarray([0, 10, 5, 300], jnp.int32))


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
def test_matches_the_seed_with_top_k_selection(rng):
    q, k, v, g_cmp, g_slc = operands(rng, t=256, hq=4, hkv=2, d=32)
    counts = np.full((1, 256, 2), 3, np.int32)
    ours = native_sparse_attention(q, k, v, g_cmp, g_slc, None, jnp.asarray(counts))
    (seed,) = seed_oracle.run("native_sparse_attention", *[np.asarray(x) for x in (q, k, v, g_cmp, g_slc)], None,
                              counts)
    assert_rel_l2(np.asarray(ours, np.float64), seed)


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
def test_repeated_blocks_count_once_here_and_twice_in_the_seed(rng):
    q, k, v, _, _ = operands(rng, t=192, hq=2, hkv=1, d=32)
    own = (np.arange(192) // 64)[None, :, None, None]
    distinct = np.concatenate([own, np.zeros_like(own) - 1], -1).astype(np.int32)  # own block, empty slot
    twice = np.concatenate([own, own], -1).astype(np.int32)  # own block listed twice
    counts = np.full((1, 192, 1), 2, np.int32)
    (seed_distinct,) = seed_oracle.run("native_sparse_attention", *[np.asarray(x) for x in (q, k, v)], None, None,
                                       distinct, counts)
    (seed_twice,) = seed_oracle.run("native_sparse_attention", *[np.asarray(x) for x in (q, k, v)], None, None,
                                    twice, counts)
    ours_distinct = native_sparse_attention(q, k, v, None, None, jnp.asarray(distinct), 2)
    ours_twice = native_sparse_attention(q, k, v, None, None, jnp.asarray(twice), 2)
    assert_rel_l2(np.asarray(ours_distinct, np.float64), seed_distinct)
    np.testing.assert_array_equal(np.asarray(ours_twice), np.asarray(ours_distinct))
    # The seed's softmax sees each key twice: the same weights within the block, so a token's own
    # block alone gives the same output; a second, different block shifts the weights.
    mixed = np.concatenate([own, np.zeros_like(own), np.zeros_like(own)], -1).astype(np.int32)
    counts3 = np.full((1, 192, 1), 3, np.int32)
    (seed_mixed,) = seed_oracle.run("native_sparse_attention", *[np.asarray(x) for x in (q, k, v)], None, None,
                                    mixed, counts3)
    ours_mixed = native_sparse_attention(q, k, v, None, None, jnp.asarray(mixed), 3)
    want = expected(q, k, v, None, None, mixed)
    assert_rel_l2(np.asarray(ours_mixed, np.float64), want)
    late = np.arange(64, 192)  # tokens whose own block is not block 0: block 0 is listed twice
    assert np.abs(seed_mixed[:, late] - want[:, late]).max() > 1e-3


def test_vmap_and_jit_are_the_loop(rng):
    xs = [operands(rng, t=130, hq=2, hkv=1, d=16) for _ in range(3)]
    stacked = [jnp.stack(parts) for parts in zip(*xs)]

    def f(q, k, v, g_cmp, g_slc):
        return native_sparse_attention(q, k, v, g_cmp, g_slc, None, 2)

    want = jnp.stack([f(*x) for x in xs])
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(f))(*stacked)), np.asarray(want), rtol=1e-6, atol=1e-6)
    gv = jax.vmap(jax.grad(lambda *x: f(*x).sum(), argnums=(0, 1, 2)))(*stacked)
    for i, x in enumerate(xs):
        gl = jax.grad(lambda *x: f(*x).sum(), argnums=(0, 1, 2))(*x)
        for a, b in zip(gv, gl):
            np.testing.assert_allclose(np.asarray(a[i]), np.asarray(b), rtol=1e-5, atol=1e-5)
