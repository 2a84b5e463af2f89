"""ejk.jax.native_sparse_attention's gradients in bfloat16 and float16 on JAX's default backend:
on a GPU install the selection's backward is libejk's CUDA kernel (the op dispatches by where
the call runs; the CUDA domain has no float32, which test_native_sparse_attention.py's float32
gradients use), on a CPU install its CPU kernel. Against jax's float64 autodiff of the dense
masked definition (nsa_reference.py), with the seed's top-k and with given repeated blocks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nsa_reference as ref
from ejk.jax import native_sparse_attention
from torch_support import assert_rel_l2


def operands(rng, dtype, b=1, t=200, hq=8, hkv=2, d=64):
    def randn(*shape):
        return jnp.asarray(rng.standard_normal(shape), dtype)

    def gate():
        return jnp.asarray(rng.uniform(0.2, 1.0, (b, t, hq)), dtype)

    return [randn(b, t, hq, d), randn(b, t, hkv, d), randn(b, t, hkv, d), gate(), gate()]


def check(x, call, reference, w, dtype_name):
    grads = jax.grad(lambda *a: (call(*a).astype(jnp.float32) * w).sum(), argnums=range(len(x)))(*x)
    with jax.enable_x64(True):
        x64 = [jnp.asarray(np.asarray(a, np.float64)) for a in x]
        want = jax.grad(lambda *a: (reference(*a) * jnp.asarray(np.asarray(w, np.float64))).sum(),
                        argnums=range(len(x)))(*x64)
        want = [np.asarray(e) for e in want]
    for g, e in zip(grads, want):
        assert_rel_l2(np.asarray(g, np.float64), e, dtype_name)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_gradients_with_the_seeds_selection(rng, dtype):
    x = operands(rng, dtype)
    idx = ref.select(np.asarray(x[0], np.float64), np.asarray(x[1], np.float64), 64 ** -0.5, 3)
    w = jnp.asarray(rng.standard_normal(x[0].shape), jnp.float32)
    check(x, lambda *a: native_sparse_attention(*a, None, 3), lambda *a: ref.nsa(jnp, *a, idx, None, 64 ** -0.5), w,
          jnp.dtype(dtype).name)


def test_gradients_with_given_repeated_blocks(rng):
    q, k, v, _, g_slc = operands(rng, jnp.bfloat16, t=300, hq=20, hkv=1, d=128)
    idx = rng.integers(-1, 5, (1, 300, 1, 4)).astype(np.int32)
    idx[..., 0] = np.arange(300)[None, :, None] // ref.BLOCK  # the own block, listed twice
    idx[..., 2] = idx[..., 0]
    w = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)
    check([q, k, v, g_slc], lambda q, k, v, g: native_sparse_attention(q, k, v, None, g, jnp.asarray(idx), 4),
          lambda q, k, v, g: ref.nsa(jnp, q, k, v, None, g, idx, None, 128 ** -0.5), w, "bfloat16")
