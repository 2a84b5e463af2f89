"""ejk.jax.ragged_decode_attention (flash_attention with the GQA group's query heads as queries
and the valid range as key segment ids) against a float64 NumPy reference written from the
seed's definition: ranges, windows around end - 1, soft cap, the three sink shapes, MQA/GQA,
the [B, 1, Hq, D] query form, a sequence with no visible key, bfloat16, jit; then against the
seed itself on identical inputs, and its refusals."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import seed_oracle
from ragged_decode_reference import reference
from ejk.jax import ragged_decode_attention
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def operands(rng, b=3, s=45, hq=8, hkv=2, d=64, dtype=jnp.float32):
    def randn(*shape):
        return jnp.asarray(rng.standard_normal(shape), dtype)
    start = np.asarray([0, 7, 30][:b], np.int32)
    end = np.asarray([45, 21, 31][:b], np.int32)
    return randn(b, hq, d), randn(b, s, hkv, d), randn(b, s, hkv, d), start, end


@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 4), (6, 1)])
@pytest.mark.parametrize("sinks", [None, "shared", "per_kv_head", "per_query_head"])
def test_matches_the_reference(rng, hq, hkv, sinks):
    q, k, v, start, end = operands(rng, hq=hq, hkv=hkv)
    aux = {None: None, "shared": (3,), "per_kv_head": (hkv, 2), "per_query_head": (hq, 2)}[sinks]
    aux = None if aux is None else jnp.asarray(rng.standard_normal(aux), jnp.float32)
    got = ragged_decode_attention(q, k, v, jnp.asarray(start), jnp.asarray(end), aux)
    assert_rel_l2(got, reference(q, k, v, start, end, aux))


def test_window_soft_cap_scale_and_jit(rng):
    q, k, v, start, end = operands(rng)
    f = jax.jit(lambda *a: ragged_decode_attention(*a, sliding_window=(9, 2), logits_soft_cap=4.0,
                                                   softmax_scale=0.2))
    got = f(q, k, v, jnp.asarray(start), jnp.asarray(end))
    assert_rel_l2(got, reference(q, k, v, start, end, window=(9, 2), cap=4.0, scale=0.2))


def test_four_dim_query_empty_range_and_bfloat16(rng):
    q, k, v, start, end = operands(rng, dtype=jnp.bfloat16)
    end = np.asarray([45, 7, 31], np.int32)  # the second sequence sees nothing: zeros
    got = ragged_decode_attention(q[:, None], k, v, jnp.asarray(start), jnp.asarray(end))
    assert got.shape == (3, 1, 8, 64) and got.dtype == jnp.bfloat16
    assert not np.asarray(got[1], np.float32).any()
    assert_rel_l2(got[:, 0], reference(q, k, v, start, end), dtype_name="bfloat16")


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
def test_matches_the_seed(rng):
    q, k, v, start, end = operands(rng)
    aux = np.asarray(rng.standard_normal((8, 2)), np.float32)
    ours = ragged_decode_attention(q, k, v, jnp.asarray(start), jnp.asarray(end), jnp.asarray(aux),
                                   sliding_window=(9, 2), logits_soft_cap=4.0)
    (seed,) = seed_oracle.run("ragged_decode_attention", np.asarray(q), np.asarray(k), np.asarray(v), start, end,
                              aux, sliding_window=(9, 2), logits_soft_cap=4.0)
    assert_rel_l2(ours, seed)


def test_refusals(rng):
    q, k, v, start, end = operands(rng)
    start, end = jnp.asarray(start), jnp.asarray(end)
    with pytest.raises(ValueError, match="key: expected"):
        jax.block_until_ready(ragged_decode_attention(q, k[:, :, :, :32], v, start, end))
    with pytest.raises(ValueError, match="sequence_end: expected"):
        jax.block_until_ready(ragged_decode_attention(q, k, v, start, end[:2]))
    with pytest.raises(ValueError, match="softmax_aux"):
        jax.block_until_ready(ragged_decode_attention(q, k, v, start, end, jnp.zeros((5, 2))))
    with pytest.raises(ValueError, match="sliding_window"):
        jax.block_until_ready(ragged_decode_attention(q, k, v, start, end, sliding_window=4))
    with pytest.raises(ValueError, match="block_q"):  # cfg is its flash_attention call's, checked by libejk
        jax.block_until_ready(ragged_decode_attention(q, k, v, start, end, cfg={"block_q": 7}))
