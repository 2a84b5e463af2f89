"""mean_pooling (with its gradient) and merge_attention_states under jax.jit against float64."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reference
from conftest import assert_close
from ejk.jax import flash_attention_with_lse, mean_pooling, merge_attention_states


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_mean_pooling_dense(rng, dtype):
    x = jnp.asarray(rng.standard_normal((3, 50, 96)), dtype)
    out = jax.jit(mean_pooling)(x)
    assert out.shape == (3, 96) and out.dtype == dtype
    assert_close(out, reference.mean_pooling(x), np.dtype(dtype).name)


def test_mean_pooling_varlen_and_empty_sequence(rng):
    x = jnp.asarray(rng.standard_normal((40, 32)), jnp.float32)
    cu = jnp.asarray([0, 7, 7, 40], jnp.int32)
    out = jax.jit(mean_pooling)(x, cu)
    assert_close(out, reference.mean_pooling(x, cu))


def test_mean_pooling_gradient_is_g_over_length(rng):
    x = jnp.asarray(rng.standard_normal((2, 10, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((2, 16)), jnp.float32)
    grad = jax.jit(jax.grad(lambda x: (mean_pooling(x) * w).sum()))(x)
    assert_close(grad, np.broadcast_to(np.asarray(w)[:, None, :] / 10, x.shape))
    cu = jnp.asarray([0, 4, 10], jnp.int32)
    packed = x.reshape(20, 16)[:10]
    grad = jax.grad(lambda x: (mean_pooling(x, cu) * w).sum())(packed)
    want = np.concatenate([np.broadcast_to(np.asarray(w)[0] / 4, (4, 16)), np.broadcast_to(np.asarray(w)[1] / 6, (6, 16))])
    assert_close(grad, want)


def test_merge_attention_states(rng):
    out_a, out_b = (jnp.asarray(rng.standard_normal((2, 30, 4, 64)), jnp.float32) for _ in range(2))
    lse_a, lse_b = (jnp.asarray(rng.standard_normal((2, 4, 30)), jnp.float32) for _ in range(2))
    lse_a = lse_a.at[0, 1, 3].set(-jnp.inf).at[1, 2, 5].set(-jnp.inf)
    lse_b = lse_b.at[1, 2, 5].set(-jnp.inf)  # both -inf: out 0, lse -inf
    out, lse = jax.jit(merge_attention_states)(out_a, lse_a, out_b, lse_b)
    ref_out, ref_lse = reference.merge_attention_states(out_a, lse_a, out_b, lse_b)
    assert_close(out, ref_out)
    assert_close(lse, ref_lse)


def test_merging_split_kv_halves_is_attention_over_all_keys(rng):
    q = jnp.asarray(rng.standard_normal((1, 40, 2, 64)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((1, 80, 2, 64)), jnp.float32) for _ in range(2))
    a = flash_attention_with_lse(q, k[:, :50], v[:, :50])
    b = flash_attention_with_lse(q, k[:, 50:], v[:, 50:])
    out, _ = merge_attention_states(a[0], a[1], b[0], b[1])
    assert_close(out, reference.flash_attention(q, k, v)[0])


def test_library_and_package_versions_agree():
    import ejk
    from ejk import _lib
    assert _lib.version() == ejk.__version__
