"""ejk.jax.state_space_v1 (and its aliases) under jax.jit against the float64 recurrence
(ssm1_reference.py): gate, initial state, bfloat16, another act_fn, conv_state passed through;
jax.grad through state_space_v1_backward against JAX's float64 autodiff of the reference; vmap;
bad arguments named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ssm1_reference
from ejk.jax import mamba1, ssm1, state_space_v1
from torch_support import no_cpu_jit, numpy64

# Gated variants and other state sizes are compiled on first use.
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

ARGS = ("x", "A", "B", "C", "D", "dt", "gate", "initial_state")


def inputs(rng, b=2, s=13, d=24, n=16, gate=False, init=False, dtype=jnp.float32):
    """Random operands as Mamba's projections give them: A in (-2, -0.5), dt a softplus."""
    def randn(*shape):
        return jnp.asarray(rng.standard_normal(shape), dtype)
    x = dict(x=randn(b, s, d), A=jnp.asarray(-rng.uniform(0.5, 2.0, (d, n)), jnp.float32), B=randn(b, s, n),
             C=randn(b, s, n), D=jnp.asarray(rng.standard_normal(d), jnp.float32),
             dt=jnp.asarray(np.log1p(np.exp(rng.normal(-1.0, 0.5, (b, s, d)))), dtype))
    if gate:
        x["gate"] = randn(b, s, d)
    if init:
        x["initial_state"] = jnp.asarray(rng.standard_normal((b, d, n)), jnp.float32)
    return x


def positional(x):
    return [x.get(name) for name in ARGS]


def expect(x):
    as64 = {name: np.asarray(a, np.float64) for name, a in x.items()}
    return ssm1_reference.state_space_v1(np, **as64)


def assert_rel_l2(got, want, tol, what=""):
    """||got - want|| / ||want|| <= tol; NaN never passes."""
    got, want = numpy64(got).astype(np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), f"{what}: a non-finite element (not written?)"
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > {tol}"


@pytest.mark.parametrize("gate,init", [(False, False), (True, True), (True, False)])
def test_forward(rng, gate, init):
    x = inputs(rng, gate=gate, init=init)
    y, h, conv = jax.jit(state_space_v1)(*positional(x))
    want_y, want_h = expect(x)
    assert conv is None and y.dtype == jnp.float32 and h.dtype == jnp.float32
    assert_rel_l2(y, want_y, 1e-5)
    assert_rel_l2(h, want_h, 1e-5)


def test_aliases_decode_step_and_conv_state(rng):
    x = inputs(rng, s=1, gate=True, init=True, n=5)
    conv = jnp.ones((2, 24, 4))
    for fn in (ssm1, mamba1):
        y, h, c = fn(*positional(x), conv_state=conv)
        want_y, want_h = expect(x)
        assert c is conv
        assert_rel_l2(y, want_y, 1e-5)
        assert_rel_l2(h, want_h, 1e-5)


def test_bfloat16_returns_the_input_dtype(rng):
    x = inputs(rng, gate=True, init=True, dtype=jnp.bfloat16)
    y, h, _ = state_space_v1(*positional(x))
    want_y, want_h = expect(x)
    assert y.dtype == jnp.bfloat16 and h.dtype == jnp.bfloat16
    assert_rel_l2(y.astype(jnp.float32), want_y, 1e-2)
    assert_rel_l2(h.astype(jnp.float32), want_h, 1e-2)


def test_another_act_fn(rng):
    x = inputs(rng, gate=True)
    y, _, _ = state_space_v1(*positional(x), act_fn=jnp.tanh)
    plain = {k: v for k, v in x.items() if k != "gate"}
    want_y, _ = expect(plain)
    assert_rel_l2(y, want_y * np.tanh(np.asarray(x["gate"], np.float64)), 1e-5)


def reference_grads(x, cot_y, cot_h, wanted):
    """JAX's float64 autodiff of the reference's loss, in x64 mode for this computation only."""
    with jax.enable_x64(True):
        fixed = {n: jnp.asarray(np.asarray(a, np.float64)) for n, a in x.items() if n not in wanted}

        def loss(*args):
            y, h = ssm1_reference.state_space_v1(jnp, **fixed, **dict(zip(wanted, args)))
            return (y * jnp.asarray(cot_y, jnp.float64)).sum() + (h * jnp.asarray(cot_h, jnp.float64)).sum()
        grads = jax.grad(loss, argnums=tuple(range(len(wanted))))(
            *(jnp.asarray(np.asarray(x[n], np.float64)) for n in wanted))
        return [np.asarray(g) for g in grads]


@pytest.mark.parametrize("gate,init,dtype", [(True, True, jnp.float32), (False, False, jnp.float32),
                                             (True, True, jnp.bfloat16)])
def test_gradients_of_every_input(rng, gate, init, dtype):
    x = inputs(rng, s=40, d=20, gate=gate, init=init, dtype=dtype)
    wanted = tuple(n for n in ARGS if n in x)
    cot_y = jnp.asarray(rng.standard_normal(x["x"].shape), dtype)
    cot_h = jnp.asarray(rng.standard_normal((2, 20, 16)), jnp.float32)

    def loss(*args):
        y, h, _ = state_space_v1(*positional(dict(x, **dict(zip(wanted, args)))))
        return (y.astype(jnp.float32) * cot_y.astype(jnp.float32)).sum() + \
            (h.astype(jnp.float32) * cot_h.astype(h.dtype).astype(jnp.float32)).sum()
    got = jax.jit(jax.grad(loss, argnums=tuple(range(len(wanted)))))(*(x[n] for n in wanted))
    want = reference_grads(x, cot_y, np.asarray(cot_h.astype(x["x"].dtype), np.float64), wanted)
    tol = 1e-5 if dtype == jnp.float32 else 3e-2
    for name, g, w in zip(wanted, got, want):
        assert g.dtype == x[name].dtype, name
        assert_rel_l2(np.asarray(g, np.float32), w, tol, name)


def test_vmap_folds_into_the_batch(rng):
    xs = [inputs(rng, b=2, gate=True, init=True) for _ in range(3)]
    stacked = {n: jnp.stack([x[n] for x in xs]) for n in ("x", "B", "C", "dt", "gate", "initial_state")}
    shared = {n: xs[0][n] for n in ("A", "D")}
    y, h = jax.vmap(lambda *a: state_space_v1(*a)[:2], in_axes=(0, None, 0, 0, None, 0, 0, 0))(
        *positional(dict(stacked, **shared)))
    for i, x in enumerate(xs):
        want_y, want_h = expect(dict(x, **shared))
        assert_rel_l2(y[i], want_y, 1e-5)
        assert_rel_l2(h[i], want_h, 1e-5)


def test_bad_arguments_are_named(rng):
    x = inputs(rng)
    with pytest.raises(ValueError, match="b: dim 2"):
        jax.block_until_ready(state_space_v1(*positional(dict(x, B=x["B"][..., :-1]))))
    with pytest.raises(ValueError, match="dt"):
        jax.block_until_ready(state_space_v1(*positional(dict(x, dt=x["dt"][:, :-1]))))
    with pytest.raises(NotImplementedError, match="platform"):
        jax.block_until_ready(state_space_v1(*positional(x), platform="triton"))
