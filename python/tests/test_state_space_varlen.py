"""ejk.jax.state_space_v1/v2 with cu_seqlens (packed sequences, an extension of the seed's
signature) under jax.jit: outputs and final states against the float64 recurrence run on each
sequence alone (ssm1/ssm2_reference.py), empty sequences and a single one included; jax.grad of
every input against JAX's float64 autodiff of that reference; bad cu_seqlens named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ssm1_reference
import ssm2_reference
from ejk.jax import state_space_v1, state_space_v2
from torch_support import no_cpu_jit, numpy64

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

OFFSETS = ([0, 6, 6, 21, 30], [0, 17], [0, 0, 9, 25, 25])
TOKENS = ("x", "B", "C", "dt", "gate")


def inputs(rng, version, cu, dtype=jnp.float32, init=True, gate=True):
    """Packed operands [1, T, ...] as Mamba's projections give them; one state per sequence."""
    T, seqs = cu[-1], len(cu) - 1

    def randn(*shape, dt=dtype):
        return jnp.asarray(rng.standard_normal(shape), dt)
    if version == 1:
        d, n = 12, 16
        x = dict(x=randn(1, T, d), A=jnp.asarray(-rng.uniform(0.5, 2.0, (d, n)), jnp.float32), B=randn(1, T, n),
                 C=randn(1, T, n), D=randn(d, dt=jnp.float32),
                 dt=jnp.asarray(np.log1p(np.exp(rng.normal(-1.0, 0.5, (1, T, d)))), dtype))
        state = (seqs, d, n)
        if gate:
            x["gate"] = randn(1, T, d)
    else:
        h, p, g, n = 4, 8, 2, 16
        x = dict(x=randn(1, T, h, p), A=jnp.asarray(-rng.uniform(0.5, 2.0, h), jnp.float32), B=randn(1, T, g, n),
                 C=randn(1, T, g, n), D=randn(h, dt=jnp.float32),
                 dt=jnp.asarray(np.log1p(np.exp(rng.normal(-1.0, 0.5, (1, T, h)))), dtype))
        state = (seqs, h, p, n)
        if gate:
            x["gate"] = randn(1, T, h * p)
    if init:
        x["initial_state"] = randn(*state, dt=jnp.float32)
    return x


def call(version, x, cu, **kwargs):
    """The wrapper with the seed's positional tensors, cu_seqlens and (v2) the groups."""
    names = ("x", "A", "B", "C", "D", "dt", "gate", "initial_state")
    args = [x.get(n) for n in names]
    if version == 1:
        return state_space_v1(*args, cu_seqlens=cu, **kwargs)
    return state_space_v2(*args, n_groups=x["B"].shape[2], cu_seqlens=cu, **kwargs)


def packed_reference(xp, version, x, cu):
    """The dense reference on each sequence alone, outputs concatenated and states stacked."""
    ref = ssm1_reference.state_space_v1 if version == 1 else ssm2_reference.state_space_v2
    ys, hs = [], []
    for s in range(len(cu) - 1):
        part = {n: v[:, cu[s]:cu[s + 1]] if n in TOKENS else v[s:s + 1] if n == "initial_state" else v
                for n, v in x.items()}
        y, h = ref(xp, **part)
        ys.append(y), hs.append(h)
    return xp.concatenate(ys, axis=1), xp.concatenate(hs, axis=0)


def assert_rel_l2(got, want, tol, what=""):
    """||got - want|| / ||want|| <= tol; NaN never passes."""
    got, want = numpy64(got).astype(np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), f"{what}: a non-finite element (not written?)"
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > {tol}"


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("cu", OFFSETS)
@pytest.mark.parametrize("dtype,init", [(jnp.float32, True), (jnp.float32, False), (jnp.bfloat16, True)])
def test_forward_equals_each_sequence_alone(rng, version, cu, dtype, init):
    x = inputs(rng, version, cu, dtype, init)
    y, h, _ = jax.jit(lambda x, cu: call(version, x, cu))(x, jnp.asarray(cu, jnp.int32))
    want_y, want_h = packed_reference(np, version, {n: np.asarray(v, np.float64) for n, v in x.items()}, cu)
    tol = 1e-5 if dtype == jnp.float32 else 1e-2
    assert y.dtype == dtype and h.shape == want_h.shape
    assert_rel_l2(y.astype(jnp.float32), want_y, tol, "y")
    assert_rel_l2(h.astype(jnp.float32), want_h, tol, "final_state")
    if init and dtype == jnp.float32 and len(cu) > 2 and cu[1] == cu[2]:  # an empty sequence: h0 passes
        np.testing.assert_array_equal(np.asarray(h[1]), np.asarray(x["initial_state"][1]))


def reference_grads(version, x, cu, cot_y, cot_h, wanted):
    """JAX's float64 autodiff of the packed reference's loss, in x64 mode for this only."""
    with jax.enable_x64(True):
        fixed = {n: jnp.asarray(np.asarray(a, np.float64)) for n, a in x.items() if n not in wanted}

        def loss(*args):
            y, h = packed_reference(jnp, version, dict(fixed, **dict(zip(wanted, args))), cu)
            return (y * jnp.asarray(cot_y, jnp.float64)).sum() + (h * jnp.asarray(cot_h, jnp.float64)).sum()
        grads = jax.grad(loss, argnums=tuple(range(len(wanted))))(
            *(jnp.asarray(np.asarray(x[n], np.float64)) for n in wanted))
        return [np.asarray(g) for g in grads]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("cu,dtype", [(OFFSETS[0], jnp.float32), (OFFSETS[2], jnp.float32),
                                      (OFFSETS[1], jnp.float32), (OFFSETS[0], jnp.bfloat16)])
def test_gradients_of_every_input(rng, version, cu, dtype):
    x = inputs(rng, version, cu, dtype)
    wanted = tuple(n for n in ("x", "A", "B", "C", "D", "dt", "gate", "initial_state") if n in x)
    cu_j = jnp.asarray(cu, jnp.int32)
    y0, h0, _ = call(version, x, cu_j)
    cot_y = jnp.asarray(rng.standard_normal(y0.shape), dtype)
    cot_h = jnp.asarray(rng.standard_normal(h0.shape), jnp.float32).astype(h0.dtype)

    def loss(*args):
        y, h, _ = call(version, dict(x, **dict(zip(wanted, args))), cu_j)
        return (y.astype(jnp.float32) * cot_y.astype(jnp.float32)).sum() + \
            (h.astype(jnp.float32) * cot_h.astype(jnp.float32)).sum()
    got = jax.jit(jax.grad(loss, argnums=tuple(range(len(wanted)))))(*(x[n] for n in wanted))
    want = reference_grads(version, x, cu, cot_y, np.asarray(cot_h, np.float64), wanted)
    tol = 1e-5 if dtype == jnp.float32 else 2e-2
    for name, g, w in zip(wanted, got, want):
        assert g.dtype == x[name].dtype, name
        assert_rel_l2(np.asarray(g, np.float32), w, tol, name)


@pytest.mark.parametrize("version", [1, 2])
def test_bad_cu_seqlens_is_named(rng, version):
    cu = [0, 6, 6, 21, 30]
    x = inputs(rng, version, cu)
    for bad, match in (([1, 6, 6, 21, 30], "cu_seqlens: must start at 0"),
                       ([0, 6, 5, 21, 30], "cu_seqlens: must be non-decreasing"),
                       ([0, 6, 6, 21, 29], "cu_seqlens: last entry must equal the packed length 30")):
        with pytest.raises(ValueError, match=match):
            jax.block_until_ready(call(version, x, jnp.asarray(bad, jnp.int32)))
    with pytest.raises(ValueError, match="initial_state"):
        jax.block_until_ready(call(version, x, jnp.asarray([0, 6, 30], jnp.int32)))
