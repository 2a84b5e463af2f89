"""ejk.jax.gla_attention and ejk.jax.lightning_attention (recurrent_attention with GLA's gates and
lightning's per-head decay) under jax.jit against the float64 recurrence, their gradients
against JAX's float64 autodiff of it, varlen, bfloat16, and the seed's XLA path on the same
inputs where the seed is installed (seed_oracle.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import recurrent_reference
import seed_oracle
from ejk.jax import gla_attention, lightning_attention
from ejk.ops.lightning_attention import lightning_decay
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")
needs_seed = pytest.mark.skipif(seed_oracle.python() is None, reason="the seed (ejkernel) is not installed")


def inputs(rng, b=2, t=19, h=4, k=16, v=32, n=None, dtype=jnp.float32):
    """q, k, v, g (log decays in (-1, 0)), g_gamma, initial_state; n: varlen with n sequences."""
    rows = 1 if n is not None else b
    randn = lambda *s: jnp.asarray(rng.standard_normal(s), dtype)  # noqa: E731
    return dict(q=randn(rows, t, h, k), k=randn(rows, t, h, k), v=randn(rows, t, h, v),
                g=jnp.asarray(-rng.uniform(0.0, 1.0, (rows, t, h, k)), dtype),
                g_gamma=jnp.asarray(-rng.uniform(0.0, 0.5, h), jnp.float32),
                initial_state=jnp.asarray(rng.standard_normal((n or b, h, k, v)), jnp.float32))


def as64(x):
    return {name: np.asarray(a, np.float64) for name, a in x.items()}


def gla_expect(x, cu=None, **opts):
    return recurrent_reference.recurrent_attention(np, **as64(x), cu_seqlens=cu, **opts)


def lightning_expect(x, layer_idx, num_layers, cu=None, **opts):
    gamma = lightning_decay(x["q"].shape[2], layer_idx, num_layers).astype(np.float64)
    return recurrent_reference.recurrent_attention(np, **as64(x), g_gamma=gamma, cu_seqlens=cu, **opts)


def test_gla_with_a_per_head_g(rng):
    """g [B, T, H], as the seed's Triton GLA reads it: one decay of the whole state per token."""
    x = inputs(rng)
    x["g"] = x["g"][..., 0]
    o, state = jax.jit(lambda *a: gla_attention(*a, return_state=True))(
        x["q"], x["k"], x["v"], x["g"], x["g_gamma"], x["initial_state"])
    want_o, want_state = gla_expect(x)
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)
    dg = jax.grad(lambda g: gla_attention(x["q"], x["k"], x["v"], g).sum())(x["g"])
    with jax.enable_x64(True):
        want = jax.grad(lambda g: recurrent_reference.recurrent_attention(
            jnp, **{n: jnp.asarray(a) for n, a in as64(x).items() if n in ("q", "k", "v")}, g=g)[0].sum())(
            jnp.asarray(np.asarray(x["g"], np.float64)))
    assert dg.shape == x["g"].shape
    assert_rel_l2(dg, np.asarray(want))


def test_lightning_decay_formula():
    np.testing.assert_allclose(lightning_decay(4, 1, 4), [0.0, -1.5, -3.0, -4.5])
    assert lightning_decay(8, 0, 2).dtype == np.float32


@pytest.mark.parametrize("reverse", [False, True])
def test_gla_forward(rng, reverse):
    x = inputs(rng)
    o, state = jax.jit(lambda *a: gla_attention(*a, return_state=True, reverse=reverse))(
        x["q"], x["k"], x["v"], x["g"], x["g_gamma"], x["initial_state"])
    want_o, want_state = gla_expect(x, reverse=reverse)
    assert o.dtype == jnp.float32 and state.dtype == jnp.float32
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)
    plain = {n: x[n] for n in ("q", "k", "v")}
    assert_rel_l2(gla_attention(x["q"], x["k"], x["v"], softmax_scale=0.3), gla_expect(plain, softmax_scale=0.3)[0])


@pytest.mark.parametrize("layer_idx, num_layers", [(0, 12), (5, 12), (3, 3)])
def test_lightning_forward(rng, layer_idx, num_layers):
    x = {n: a for n, a in inputs(rng).items() if n not in ("g", "g_gamma")}
    o, state = jax.jit(lambda q, k, v, h0: lightning_attention(q, k, v, h0, layer_idx=layer_idx, num_layers=num_layers,
                                                               return_state=True))(x["q"], x["k"], x["v"],
                                                                                   x["initial_state"])
    want_o, want_state = lightning_expect(x, layer_idx, num_layers)
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)


def test_varlen_with_an_empty_sequence(rng):
    cu = [0, 7, 7, 25]
    x = inputs(rng, t=25, n=3)
    o, state = gla_attention(x["q"][0], x["k"][0], x["v"][0], x["g"][0], x["g_gamma"], x["initial_state"],
                             jnp.asarray(cu, jnp.int32), return_state=True)
    want_o, want_state = gla_expect(x, cu)
    assert_rel_l2(o, want_o[0])
    assert_rel_l2(state, want_state)
    assert_rel_l2(state[1], np.asarray(x["initial_state"][1]))  # no tokens: the state as it came
    y = {n: x[n] for n in ("q", "k", "v", "initial_state")}
    o, state = lightning_attention(y["q"], y["k"], y["v"], y["initial_state"], jnp.asarray(cu, jnp.int32),
                                   layer_idx=2, num_layers=6, return_state=True, reverse=True)
    want_o, want_state = lightning_expect(y, 2, 6, cu, reverse=True)
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)


def test_bfloat16(rng):
    x = inputs(rng, k=64, v=64, dtype=jnp.bfloat16)
    o = gla_attention(x["q"], x["k"], x["v"], x["g"], x["g_gamma"], x["initial_state"])
    assert o.dtype == jnp.bfloat16
    assert_rel_l2(o, gla_expect(x)[0], "bfloat16")


def _grads_match(fn, reference, x, names, rng):
    """jax.grad of sum(o * w) + sum(state * w') through fn against float64 autodiff of reference."""
    w_o = rng.standard_normal(x["v"].shape)
    w_s = rng.standard_normal(x["initial_state"].shape)

    def loss(run, args):
        o, state = run(args)
        return (o.astype(jnp.float32 if o.dtype != jnp.float64 else o.dtype) * w_o).sum() + (state * w_s).sum()

    got = jax.jit(jax.grad(lambda d: loss(fn, {**x, **d})))({n: x[n] for n in names})
    with jax.enable_x64(True):
        x64 = {n: jnp.asarray(np.asarray(a, np.float64)) for n, a in x.items()}
        want = jax.grad(lambda d: loss(reference, {**x64, **d}))({n: x64[n] for n in names})
    for n in names:
        assert_rel_l2(got[n], np.asarray(want[n]))


def test_gla_gradients(rng):
    x = inputs(rng)
    _grads_match(lambda a: gla_attention(a["q"], a["k"], a["v"], a["g"], a["g_gamma"], a["initial_state"],
                                         return_state=True),
                 lambda a: recurrent_reference.recurrent_attention(jnp, **a),
                 x, ("q", "k", "v", "g", "initial_state"), rng)


def test_lightning_gradients(rng):
    x = {n: a for n, a in inputs(rng).items() if n not in ("g", "g_gamma")}
    gamma = lightning_decay(4, 1, 3)
    _grads_match(lambda a: lightning_attention(a["q"], a["k"], a["v"], a["initial_state"], layer_idx=1, num_layers=3,
                                               return_state=True),
                 lambda a: recurrent_reference.recurrent_attention(jnp, **a, g_gamma=jnp.asarray(gamma, a["q"].dtype)),
                 x, ("q", "k", "v", "initial_state"), rng)


def test_bad_arguments_are_named(rng):
    x = inputs(rng)
    with pytest.raises(ValueError, match="num_layers"):
        jax.block_until_ready(lightning_attention(x["q"], x["k"], x["v"], layer_idx=0, num_layers=0))
    with pytest.raises(TypeError, match="layer_idx"):
        jax.block_until_ready(lightning_attention(x["q"], x["k"], x["v"], layer_idx=0.5, num_layers=2))
    with pytest.raises(ValueError, match=r"\bg\b"):
        jax.block_until_ready(gla_attention(x["q"], x["k"], x["v"], x["g"][..., :3]))  # K 3, not 16
    with pytest.raises(NotImplementedError, match="platform"):
        jax.block_until_ready(gla_attention(x["q"], x["k"], x["v"], platform="triton"))


@needs_seed
def test_against_the_seed(rng):
    """The seed's XLA path on identical inputs: GLA with both gates and a state, lightning."""
    x = {n: np.asarray(a) for n, a in inputs(rng, t=11).items()}
    ours = gla_attention(x["q"], x["k"], x["v"], x["g"], x["g_gamma"], x["initial_state"], return_state=True)
    theirs = seed_oracle.run("gla_attention", x["q"], x["k"], x["v"], x["g"], x["g_gamma"], x["initial_state"],
                             return_state=True)
    for a, b in zip(ours, theirs):
        assert_rel_l2(a, b)
    ours = lightning_attention(x["q"], x["k"], x["v"], x["initial_state"], layer_idx=2, num_layers=8,
                               return_state=True)
    theirs = seed_oracle.run("lightning_attention", x["q"], x["k"], x["v"], x["initial_state"], layer_idx=2,
                             num_layers=8, return_state=True)
    for a, b in zip(ours, theirs):
        assert_rel_l2(a, b)
