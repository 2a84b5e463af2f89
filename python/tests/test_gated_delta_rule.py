"""ejk.jax.gated_delta_rule, kernel_delta_attention (kda_attention) and kda_decay under jax.jit
against the float64 recurrence (delta_reference.py): decay, segment ids, the L2 normalization,
initial and final states, bfloat16; jax.grad through gated_delta_rule_backward against JAX's
float64 autodiff of the reference; vmap; the seed's XLA path on the same inputs where the seed
is installed (seed_oracle.py); bad arguments named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import delta_reference
import seed_oracle
from ejk.jax import gated_delta_rule, kda_attention, kda_decay, kernel_delta_attention
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")
needs_seed = pytest.mark.skipif(seed_oracle.python() is None, reason="the seed (ejkernel) is not installed")


def inputs(rng, b=2, t=21, h=3, k=16, v=24, dtype=jnp.float32, segments=False):
    """q, k, v normal; beta in (0, 1); decay log-sigmoids; an initial state; segment ids."""
    randn = lambda *s: rng.standard_normal(s)  # noqa: E731
    x = dict(q=randn(b, t, h, k), k=randn(b, t, h, k), v=randn(b, t, h, v),
             beta=1 / (1 + np.exp(-randn(b, t, h))), decay=-np.log1p(np.exp(-(randn(b, t, h) + 2))))
    x = {n: jnp.asarray(a, dtype) for n, a in x.items()}
    x["initial_state"] = jnp.asarray(randn(b, h, k, v), jnp.float32)
    if segments:
        x["seg_ids"] = jnp.asarray(np.cumsum(rng.uniform(size=(b, t)) < 0.2, axis=1), jnp.int32)
    return x


def expect(x, **opts):
    as64 = {n: np.asarray(a, np.int32 if n == "seg_ids" else np.float64) for n, a in x.items()}
    return delta_reference.gated_delta_rule(np, **as64, **opts)


def positional(x):
    return [x.get(n) for n in ("q", "k", "v", "beta", "decay", "seg_ids", "initial_state")]


@pytest.mark.parametrize("segments, l2norm", [(False, True), (True, True), (True, False)])
def test_forward(rng, segments, l2norm):
    x = inputs(rng, segments=segments)
    o, state = jax.jit(lambda *a: gated_delta_rule(*a, use_qk_l2norm=l2norm, return_state=True))(*positional(x))
    want_o, want_state = expect(x, use_qk_l2norm=l2norm)
    assert o.dtype == jnp.float32 and state.dtype == jnp.float32
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)
    plain = {n: x[n] for n in ("q", "k", "v", "beta")}
    assert_rel_l2(gated_delta_rule(*positional(plain)), expect(plain)[0])  # no decay, no state, eagerly


def test_bfloat16_returns_the_state_in_the_input_dtype(rng):
    x = inputs(rng, k=64, v=64, dtype=jnp.bfloat16)
    o, state = gated_delta_rule(*positional(x), return_state=True)
    assert o.dtype == jnp.bfloat16 and state.dtype == jnp.bfloat16
    want_o, want_state = expect(x)
    assert_rel_l2(o, want_o, "bfloat16")
    assert_rel_l2(state, want_state, "bfloat16")


def test_kernel_delta_attention(rng):
    x = inputs(rng)
    args = [x[n] for n in ("q", "k", "v", "beta", "decay", "initial_state")]
    o, state = jax.jit(lambda *a: kernel_delta_attention(*a, softmax_scale=0.3, return_state=True))(*args)
    want_o, want_state = expect({n: x[n] for n in ("q", "k", "v", "beta", "decay", "initial_state")},
                                softmax_scale=0.3)
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)
    assert_rel_l2(kda_attention(*args, use_qk_l2norm=False), expect(x, use_qk_l2norm=False)[0])
    o16 = kernel_delta_attention(*(a.astype(jnp.bfloat16) for a in args[:5]), args[5])
    assert o16.dtype == jnp.float32  # as the seed's XLA path


def test_kda_decay(rng):
    gate, a_log, bias = rng.standard_normal((2, 5, 3)), rng.standard_normal(3), rng.standard_normal(3)
    want = -np.exp(a_log) * np.log1p(np.exp(gate + bias))
    got = kda_decay(jnp.asarray(gate, jnp.float32), jnp.asarray(a_log, jnp.float32), jnp.asarray(bias, jnp.float32))
    assert got.dtype == jnp.float32
    assert_rel_l2(got, want)


DIFFERENTIABLE = ("q", "k", "v", "beta", "decay", "initial_state")


@pytest.mark.parametrize("segments", [False, True])
def test_gradients(rng, segments):
    x = inputs(rng, t=13, segments=segments)
    w_o, w_s = rng.standard_normal(x["v"].shape), rng.standard_normal(x["initial_state"].shape)

    def loss(o, state):
        return (o * w_o).sum() + (state * w_s).sum()

    got = jax.jit(jax.grad(lambda d: loss(*gated_delta_rule(*positional({**x, **d}), return_state=True))))(
        {n: x[n] for n in DIFFERENTIABLE})
    with jax.enable_x64(True):
        x64 = {n: jnp.asarray(np.asarray(a, np.int32 if n == "seg_ids" else np.float64)) for n, a in x.items()}
        want = jax.grad(lambda d: loss(*delta_reference.gated_delta_rule(jnp, **{**x64, **d})))(
            {n: x64[n] for n in DIFFERENTIABLE})
    for n in DIFFERENTIABLE:
        assert got[n].dtype == x[n].dtype, n
        assert_rel_l2(got[n], np.asarray(want[n]))


def test_vmap_folds_into_the_batch(rng):
    xs = [inputs(rng, b=2, t=9) for _ in range(2)]
    stacked = [jnp.stack([x[n] for x in xs]) for n in ("q", "k", "v", "beta", "decay")]
    o = jax.vmap(lambda *a: gated_delta_rule(*a))(*stacked)
    for i, x in enumerate(xs):
        assert_rel_l2(o[i], expect({n: x[n] for n in ("q", "k", "v", "beta", "decay")})[0])


def test_bad_arguments_are_named(rng):
    x = inputs(rng)
    q, k, v, beta = x["q"], x["k"], x["v"], x["beta"]
    with pytest.raises(ValueError, match=r"\bbeta\b"):
        jax.block_until_ready(gated_delta_rule(q, k, v, beta[..., None]))
    with pytest.raises(ValueError, match=r"\bdecay\b"):
        jax.block_until_ready(gated_delta_rule(q, k, v, beta, x["decay"][:, :5]))
    with pytest.raises(ValueError, match="seg_ids"):
        jax.block_until_ready(gated_delta_rule(q, k, v, beta, None, jnp.zeros((2, 21), jnp.float32)))
    with pytest.raises(NotImplementedError, match="mesh"):
        jax.block_until_ready(gated_delta_rule(q, k, v, beta, mesh=object()))
    with pytest.raises(ValueError, match="chunk_size"):
        jax.block_until_ready(kernel_delta_attention(q, k, v, beta, chunk_size=0))


@needs_seed
def test_against_the_seed(rng):
    """The seed's XLA path on identical inputs (its chunked gated delta rule, its KDA scan). With
    seg_ids the seed pads T to its chunk with a segment of its own, so its final_state is that
    padding's (zeros) unless T is a multiple of the chunk: there only o is compared."""
    x = {n: np.asarray(a) for n, a in inputs(rng, t=40, segments=True).items()}
    plain = {n: a for n, a in x.items() if n != "seg_ids"}
    ours = gated_delta_rule(*positional(plain), return_state=True)
    theirs = seed_oracle.run("gated_delta_rule", *positional(plain), return_state=True)
    for a, b in zip(ours, theirs):
        assert_rel_l2(a, b)
    assert_rel_l2(gated_delta_rule(*positional(x)), seed_oracle.run("gated_delta_rule", *positional(x))[0])
    args = [x[n] for n in ("q", "k", "v", "beta", "decay", "initial_state")]
    ours = kernel_delta_attention(*args, softmax_scale=0.2, return_state=True)
    theirs = seed_oracle.run("kernel_delta_attention", *args, softmax_scale=0.2, return_state=True)
    for a, b in zip(ours, theirs):
        assert_rel_l2(a, b)
