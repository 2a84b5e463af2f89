"""ejk.jax on CUDA arrays under jax.jit (the handlers run on XLA's stream) against the float64
reference: flash attention's masks, GQA, varlen and a head_dim compiled by NVRTC; mean pooling
with its gradient; merge_attention_states; vmap. Skipped, saying why, where JAX has no GPU."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reference
from conftest import assert_close
from ejk.jax import flash_attention, flash_attention_with_lse, mean_pooling, merge_attention_states


def _gpu():
    try:
        return jax.devices("gpu")[0]
    except RuntimeError as e:
        return str(e).splitlines()[0]


GPU = _gpu()
pytestmark = pytest.mark.skipif(isinstance(GPU, str), reason=f"no CUDA device for JAX: {GPU}")
STATIC = ("softmax_scale", "causal", "sliding_window", "logits_soft_cap", "normalize_output")


def on_gpu(rng, shape, dtype=jnp.bfloat16):
    return jax.device_put(jnp.asarray(rng.standard_normal(shape), dtype), GPU)


CASES = {
    "plain_d128": dict(d=128),
    "causal_d64": dict(d=64, causal=True),
    "window_softcap_gqa": dict(d=64, hq=8, hkv=2, sliding_window=(40, 0), logits_soft_cap=20.0, causal=True),
    "causal_d256_f16": dict(d=256, causal=True, dtype=jnp.float16),
    "nvrtc_d80": dict(d=80, sliding_window=(32, 32)),
}


@pytest.mark.parametrize("name", CASES)
def test_flash_attention(rng, name):
    c = dict(CASES[name])
    d, hq, hkv, dtype = c.pop("d"), c.pop("hq", 4), c.pop("hkv", 2), c.pop("dtype", jnp.bfloat16)
    q, k, v = on_gpu(rng, (2, 300, hq, d), dtype), on_gpu(rng, (2, 333, hkv, d), dtype), on_gpu(rng, (2, 333, hkv, d), dtype)
    out, lse = jax.jit(flash_attention_with_lse, static_argnames=STATIC)(q, k, v, **c)
    assert out.devices() == {GPU} and out.dtype == dtype
    ref_out, ref_lse = reference.flash_attention(np.asarray(q), np.asarray(k), np.asarray(v), **c)
    assert_close(out, ref_out, np.dtype(dtype).name)
    assert_close(lse, ref_lse, "bfloat16")  # f32 LSE of 16-bit inputs


def test_flash_attention_varlen(rng):
    cu_q, cu_k = np.array([0, 100, 100, 260], np.int32), np.array([0, 130, 200, 390], np.int32)
    q, k, v = on_gpu(rng, (260, 4, 128)), on_gpu(rng, (390, 2, 128)), on_gpu(rng, (390, 2, 128))
    f = jax.jit(flash_attention, static_argnames=STATIC)
    out = f(q, k, v, None, jax.device_put(cu_q, GPU), jax.device_put(cu_k, GPU), causal=True)
    ref = reference.flash_attention(np.asarray(q), np.asarray(k), np.asarray(v), cum_seqlens_q=cu_q,
                                    cum_seqlens_k=cu_k, causal=True)[0]
    assert_close(out, ref, "bfloat16")


def test_flash_attention_vmap_is_one_batch(rng):
    q, k, v = (on_gpu(rng, (3, 2, 128, 4, 64)) for _ in range(3))
    out = jax.jit(jax.vmap(lambda q, k, v: flash_attention(q, k, v, causal=True)))(q, k, v)
    ref = reference.flash_attention(*(np.asarray(x).reshape(6, 128, 4, 64) for x in (q, k, v)), causal=True)[0]
    assert_close(np.asarray(out).reshape(ref.shape), ref, "bfloat16")


def test_mean_pooling_and_gradient(rng):
    x = on_gpu(rng, (4, 500, 256))
    assert_close(jax.jit(mean_pooling)(x), reference.mean_pooling(np.asarray(x)), "bfloat16")
    w = on_gpu(rng, (4, 256), jnp.float32)
    grad = jax.jit(jax.grad(lambda x: (mean_pooling(x).astype(jnp.float32) * w).sum()))(x)
    assert_close(grad, np.broadcast_to(np.asarray(w)[:, None, :] / 500, x.shape), "bfloat16")
    cu = jax.device_put(jnp.asarray([0, 0, 120, 500], jnp.int32), GPU)  # an empty sequence: zeros
    packed = on_gpu(rng, (500, 256))
    assert_close(jax.jit(mean_pooling)(packed, cu), reference.mean_pooling(np.asarray(packed), np.asarray(cu)),
                 "bfloat16")


def test_merge_attention_states(rng):
    out_a, out_b = on_gpu(rng, (2, 64, 4, 128)), on_gpu(rng, (2, 64, 4, 128))
    lse_a, lse_b = (np.asarray(rng.standard_normal((2, 4, 64)), np.float32) for _ in range(2))
    lse_a[0, 1, 3] = lse_a[1, 2, 5] = lse_b[1, 2, 5] = -np.inf
    out, lse = jax.jit(merge_attention_states)(out_a, jax.device_put(lse_a, GPU), out_b, jax.device_put(lse_b, GPU))
    ref_out, ref_lse = reference.merge_attention_states(np.asarray(out_a), lse_a, np.asarray(out_b), lse_b)
    assert_close(out, ref_out, "bfloat16")
    assert_close(lse, ref_lse)
