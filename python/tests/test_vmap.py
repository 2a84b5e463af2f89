"""jax.vmap: the mapped axis folds into the ops' batch axis (or maps one example at a time where
it cannot), also nested and under jit, with unmapped operands broadcast."""
import jax
import jax.numpy as jnp
import numpy as np

import reference
from conftest import assert_close
from ejk.jax import flash_attention, flash_attention_with_lse, mean_pooling, merge_attention_states
from ejk.types import MaskInfo


def normal(rng, *shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


def test_flash_vmap_folds_batch_with_unmapped_bias_and_kv(rng):
    q = normal(rng, 3, 2, 20, 4, 64)            # mapped: V=3, B=2
    k, v = normal(rng, 2, 24, 2, 64), normal(rng, 2, 24, 2, 64)  # shared by every example
    bias = normal(rng, 1, 4, 20, 24)
    f = jax.jit(jax.vmap(lambda q: flash_attention(q, k, v, bias, causal=True)))
    out = f(q)
    for i in range(3):
        assert_close(out[i], reference.flash_attention(q[i], k, v, bias=bias, causal=True)[0])


def test_flash_vmap_mapped_bias_and_segments(rng):
    q, k, v = normal(rng, 2, 2, 16, 2, 64), normal(rng, 2, 2, 16, 2, 64), normal(rng, 2, 2, 16, 2, 64)
    bias = normal(rng, 2, 1, 2, 16, 16)  # mapped, B|1 = 1
    seg = jnp.asarray(rng.integers(0, 2, (2, 2, 16)), jnp.int32)
    out = jax.vmap(lambda q, k, v, b, s: flash_attention(q, k, v, b, mask_info=MaskInfo.from_segments(s)))(
        q, k, v, bias, seg)
    for i in range(2):
        want = reference.flash_attention(q[i], k[i], v[i], bias=bias[i], q_segment_ids=seg[i], kv_segment_ids=seg[i])
        assert_close(out[i], want[0])


def test_flash_vmap_mapped_sinks_and_lse_run_one_at_a_time(rng):
    q = normal(rng, 3, 1, 12, 2, 64)
    sinks = normal(rng, 3, 2, 1)
    f = jax.vmap(lambda q, s: flash_attention_with_lse(q, q, q, None, None, None, s))
    out, lse = f(q, sinks)
    for i in range(3):
        want = reference.flash_attention(q[i], q[i], q[i], softmax_aux=sinks[i])
        assert_close(out[i], want[0])
        assert_close(lse[i], want[1])


def test_flash_nested_vmap(rng):
    q = normal(rng, 2, 3, 1, 10, 2, 64)
    out = jax.jit(jax.vmap(jax.vmap(lambda q: flash_attention(q, q, q, sliding_window=4))))(q)
    for i in range(2):
        for j in range(3):
            assert_close(out[i, j], reference.flash_attention(q[i, j], q[i, j], q[i, j], sliding_window=4)[0])


def test_flash_vmap_varlen(rng):
    q = normal(rng, 2, 30, 2, 64)
    cu = jnp.asarray([0, 10, 30], jnp.int32)
    out = jax.vmap(lambda q: flash_attention(q, q, q, None, cu, cu, causal=True))(q)
    for i in range(2):
        assert_close(out[i], reference.flash_attention(q[i], q[i], q[i], cum_seqlens_q=cu, cum_seqlens_k=cu,
                                                       causal=True)[0])


def _per_example_grads(loss, args):
    """jax.grad of loss on each example alone: what the vmapped gradient must equal."""
    return [jax.grad(loss, argnums=tuple(range(len(args))))(*(a[i] for a in args)) for i in range(args[0].shape[0])]


def test_flash_vmap_of_grad_folds_the_backward(rng):
    q, k, v = normal(rng, 3, 2, 20, 4, 64), normal(rng, 3, 2, 24, 2, 64), normal(rng, 3, 2, 24, 2, 64)

    def loss(q, k, v):
        return jnp.sum(flash_attention(q, k, v, causal=True, sliding_window=(6, 0)) ** 2)

    got = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2))))(q, k, v)
    for i, want in enumerate(_per_example_grads(loss, (q, k, v))):
        for g, w in zip(got, want):
            assert_close(g[i], w)


def test_flash_vmap_of_grad_with_bias_and_sinks_runs_one_at_a_time(rng):
    q, bias, sinks = normal(rng, 2, 1, 12, 2, 64), normal(rng, 2, 1, 2, 12, 12), normal(rng, 2, 2, 1)

    def loss(q, bias, sinks):
        return jnp.sum(flash_attention(q, q, q, bias, None, None, sinks) ** 2)

    got = jax.vmap(jax.grad(loss, argnums=(0, 1, 2)))(q, bias, sinks)
    for i, want in enumerate(_per_example_grads(loss, (q, bias, sinks))):
        for g, w in zip(got, want):
            assert_close(g[i], w)


def test_mean_pooling_vmap(rng):
    x = normal(rng, 4, 2, 9, 32)
    assert_close(jax.vmap(mean_pooling)(x), np.stack([reference.mean_pooling(x[i]) for i in range(4)]))
    packed = normal(rng, 3, 12, 32)
    cu = jnp.asarray([0, 5, 12], jnp.int32)
    assert_close(jax.vmap(lambda x: mean_pooling(x, cu))(packed),
                 np.stack([reference.mean_pooling(packed[i], cu) for i in range(3)]))
    grads = jax.vmap(jax.grad(lambda x: mean_pooling(x).sum()))(x)
    assert_close(grads, np.full(x.shape, 1 / 9))


def test_merge_vmap_with_an_unmapped_part(rng):
    out_a, lse_a = normal(rng, 3, 5, 2, 16), normal(rng, 3, 2, 5)
    out_b, lse_b = normal(rng, 5, 2, 16), normal(rng, 2, 5)
    out, lse = jax.vmap(merge_attention_states, in_axes=(0, 0, None, None))(out_a, lse_a, out_b, lse_b)
    for i in range(3):
        want = reference.merge_attention_states(out_a[i], lse_a[i], out_b, lse_b)
        assert_close(out[i], want[0])
        assert_close(lse[i], want[1])
