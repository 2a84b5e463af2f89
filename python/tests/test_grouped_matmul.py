"""ejk.jax.grouped_matmul under jax.jit against the float64 per-group loop
(grouped_matmul_reference.py): empty groups, rows past the sizes' sum, group_offset with more
sizes than groups, transpose_rhs, existing_out, preferred_element_type, bfloat16; jax.grad
through grouped_matmul_backward against the loop's gradients; bad arguments named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grouped_matmul_reference as ref
from ejk.jax import grouped_matmul
from torch_support import assert_rel_l2

SIZES = np.array([9, 0, 30, 17, 4], np.int32)


def operands(rng, m=64, k=24, n=40, groups=5, dtype=jnp.float32):
    lhs = jnp.asarray(rng.standard_normal((m, k)), dtype)
    rhs = jnp.asarray(rng.standard_normal((groups, k, n)), dtype)
    return lhs, rhs


CASES = {
    "plain": dict(),
    "rows_past_the_sum": dict(sizes=np.array([5, 0, 20, 3, 1], np.int32)),
    "offset": dict(groups=3, offset=1),
    "transposed_existing": dict(transpose=True, existing=True),
    "bf16": dict(dtype=jnp.bfloat16, transpose=True),
    "bf16_out": dict(dtype=jnp.bfloat16, out_dtype=jnp.bfloat16, existing=True),
}


@pytest.mark.parametrize("name", CASES)
def test_forward_and_gradients(rng, name):
    case = CASES[name]
    dtype = case.get("dtype", jnp.float32)
    sizes, groups, offset = case.get("sizes", SIZES), case.get("groups", 5), case.get("offset")
    lhs, rhs = operands(rng, groups=groups, dtype=dtype)
    weights = jnp.swapaxes(rhs, 1, 2) if case.get("transpose") else rhs
    existing = jnp.asarray(rng.standard_normal((64, 40)), jnp.float32) if case.get("existing") else None
    out_dtype = case.get("out_dtype")
    group_offset = None if offset is None else jnp.asarray(offset, jnp.int32)

    def f(lhs, weights, existing):
        return grouped_matmul(lhs, weights, jnp.asarray(sizes), group_offset, existing,
                              transpose_rhs=bool(case.get("transpose")), preferred_element_type=out_dtype)

    out = jax.jit(f)(lhs, weights, existing)
    assert out.shape == (64, 40) and out.dtype == (out_dtype or jnp.float32)
    name16 = "float32" if dtype == jnp.float32 else "bfloat16"
    assert_rel_l2(out, ref.forward(lhs, rhs, sizes, offset or 0, existing), name16)

    d_out = rng.standard_normal((64, 40))
    loss = lambda *a: jnp.sum(f(*a).astype(jnp.float32) * d_out)
    argnums = (0, 1, 2) if existing is not None else (0, 1)
    grads = jax.jit(jax.grad(loss, argnums=argnums))(lhs, weights, existing)
    want_lhs, want_rhs = ref.backward(lhs, rhs, sizes, d_out, offset or 0)
    if case.get("transpose"):
        want_rhs = np.swapaxes(want_rhs, 1, 2)
    assert grads[0].dtype == dtype and grads[1].dtype == dtype
    tol = "float32" if dtype == jnp.float32 and out_dtype is None else "bfloat16"
    assert_rel_l2(grads[0], want_lhs, tol)
    assert_rel_l2(grads[1], want_rhs, tol)
    if existing is not None:
        assert_rel_l2(grads[2], d_out, tol)


def test_bad_arguments_are_named(rng):
    lhs, rhs = operands(rng)
    with pytest.raises(ValueError, match="group_sizes"):
        jax.block_until_ready(grouped_matmul(lhs, rhs, jnp.asarray(SIZES[:3])))
    with pytest.raises(ValueError, match="rhs"):
        jax.block_until_ready(grouped_matmul(lhs, rhs[:, :5], jnp.asarray(SIZES)))
    with pytest.raises(NotImplementedError, match="rhs_scale"):
        jax.block_until_ready(grouped_matmul(lhs, rhs, jnp.asarray(SIZES), rhs_scale=jnp.ones((5, 1, 1, 40))))
