"""ejk.jax.state_space_v2 (and its aliases) under jax.jit against the float64 recurrence
(ssm2_reference.py): groups, initial state, gate with and without the gated RMSNorm, bfloat16;
jax.grad through state_space_v2_backward against JAX's float64 autodiff of the reference;
bad arguments named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ssm2_reference
from ejk.jax import mamba2, ssm2, state_space_v2
from torch_support import no_cpu_jit, numpy64

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

ARGS = ("x", "A", "B", "C", "D", "dt", "gate", "initial_state")


def inputs(rng, b=2, s=11, h=4, p=6, g=2, n=8, gate=False, init=False, dtype=jnp.float32):
    def randn(*shape):
        return jnp.asarray(rng.standard_normal(shape), dtype)
    x = dict(x=randn(b, s, h, p), A=jnp.asarray(-rng.uniform(0.5, 2.0, h), jnp.float32), B=randn(b, s, g, n),
             C=randn(b, s, g, n), D=jnp.asarray(rng.standard_normal(h), jnp.float32),
             dt=jnp.asarray(np.log1p(np.exp(rng.normal(-1.0, 0.5, (b, s, h)))), dtype))
    if gate:
        x["gate"] = randn(b, s, h * p)
    if init:
        x["initial_state"] = jnp.asarray(rng.standard_normal((b, h, p, n)), jnp.float32)
    return x


def positional(x):
    return [x.get(name) for name in ARGS[:6]]


def keywords(x):
    return {name: x[name] for name in ("gate", "initial_state") if name in x}


def assert_rel_l2(got, want, tol, what=""):
    got, want = numpy64(got).astype(np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), f"{what}: a non-finite element"
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > {tol}"


def expect(x, **opts):
    return ssm2_reference.state_space_v2(np, **{k: np.asarray(v, np.float64) for k, v in x.items()}, **opts)


@pytest.mark.parametrize("gate,norm,init", [(False, False, False), (True, False, True), (True, True, True)])
def test_forward(rng, gate, norm, init):
    x = inputs(rng, gate=gate, init=init)
    fn = jax.jit(lambda *a, **k: state_space_v2(*a, n_groups=2, use_gated_rmsnorm=norm, **k))
    y, h, conv = fn(*positional(x), **keywords(x))
    want_y, want_h = expect(x, use_gated_rmsnorm=norm)
    assert conv is None and y.shape == (2, 11, 24)
    assert_rel_l2(y, want_y, 1e-5, "y")
    assert_rel_l2(h, want_h, 1e-5, "h")


def test_aliases_bfloat16_and_decode_step(rng):
    x = inputs(rng, s=1, g=1, gate=True, init=True, dtype=jnp.bfloat16)
    for fn in (ssm2, mamba2):
        y, h, _ = fn(*positional(x), **keywords(x))
        want_y, want_h = expect(x)
        assert y.dtype == jnp.bfloat16 and h.dtype == jnp.bfloat16
        assert_rel_l2(y, want_y, 1e-2, "y")
        assert_rel_l2(h, want_h, 1e-2, "h")


@pytest.mark.parametrize("norm", [False, True])
def test_gradients_of_every_input(rng, norm):
    x = inputs(rng, s=30, gate=True, init=True)
    wanted = tuple(n for n in ARGS if n in x)
    cot_y = jnp.asarray(rng.standard_normal((2, 30, 24)), jnp.float32)
    cot_h = jnp.asarray(rng.standard_normal((2, 4, 6, 8)), jnp.float32)

    def loss(*args):
        v = dict(x, **dict(zip(wanted, args)))
        y, h, _ = state_space_v2(*positional(v), **keywords(v), n_groups=2, use_gated_rmsnorm=norm)
        return (y * cot_y).sum() + (h * cot_h).sum()
    got = jax.jit(jax.grad(loss, argnums=tuple(range(len(wanted)))))(*(x[n] for n in wanted))
    with jax.enable_x64(True):
        fixed = {n: jnp.asarray(np.asarray(a, np.float64)) for n, a in x.items() if n not in wanted}

        def ref_loss(*args):
            y, h = ssm2_reference.state_space_v2(jnp, **fixed, **dict(zip(wanted, args)), use_gated_rmsnorm=norm)
            return (y * jnp.asarray(cot_y, jnp.float64)).sum() + (h * jnp.asarray(cot_h, jnp.float64)).sum()
        want = jax.grad(ref_loss, argnums=tuple(range(len(wanted))))(
            *(jnp.asarray(np.asarray(x[n], np.float64)) for n in wanted))
        want = [np.asarray(w) for w in want]
    for name, g, w in zip(wanted, got, want):
        assert g.dtype == x[name].dtype, name
        assert_rel_l2(g, w, 1e-5, name)


def test_bad_arguments_are_named(rng):
    x = inputs(rng)
    with pytest.raises(ValueError, match="n_groups"):
        jax.block_until_ready(state_space_v2(*positional(x), n_groups=1))
    with pytest.raises(ValueError, match="dt"):
        jax.block_until_ready(state_space_v2(*positional(dict(x, dt=x["dt"][:, :-1])), n_groups=2))
    with pytest.raises(NotImplementedError, match="precision"):
        jax.block_until_ready(state_space_v2(*positional(x), n_groups=2, precision="highest"))
