"""ejk.jax.ragged_page_attention_v3 (the cache write, then ragged_page_attention_v2 on the
packed cache): the updated cache and the output against a float64 NumPy reference of the seed's
definition (prefill, chunked prefill and decode sequences in one call, inactive rows of the
tables, GQA, a window, sinks, a soft cap, q/k/v scales, a head dim padded to 128, float32 and
bfloat16), against the seed itself on identical inputs, and the refusals."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import seed_oracle
from ragged_page_v3_reference import problem as numpy_problem, reference
from ejk.jax import ragged_page_attention_v3
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

def problem(rng, hq=8, hkv=2, d=64, dtype=jnp.float32):
    """The reference's problem with its floats rounded to dtype (kept as float32 arrays)."""
    p = numpy_problem(rng, hq, hkv, d, pack=1 if dtype == jnp.float32 else 2)
    for n in ("q", "k", "v", "cache"):
        p[n] = np.asarray(jnp.asarray(p[n], dtype).astype(jnp.float32))
    p["dtype"] = dtype
    return p


def call(p, sinks=None, **opts):
    args = [jnp.asarray(p[n], p["dtype"]) for n in ("q", "k", "v", "cache")]
    args += [jnp.asarray(p[n]) for n in ("kv_lens", "tables", "qsl", "dist")]
    return ragged_page_attention_v3(*args, None if sinks is None else jnp.asarray(sinks), **opts)


@pytest.mark.parametrize("hq,hkv,d", [(8, 2, 64), (4, 4, 128), (6, 1, 96)])
def test_matches_the_reference(rng, hq, hkv, d):
    p = problem(rng, hq, hkv, d)
    out, cache = call(p)
    want_out, want_cache = reference(p)
    assert_rel_l2(cache, want_cache)
    assert_rel_l2(out, want_out)


def test_window_sinks_cap_scales_bfloat16_and_jit(rng):
    p = problem(rng, dtype=jnp.bfloat16)
    sinks = rng.standard_normal(8).astype(np.float32)
    opts = dict(softmax_scale=0.125, sliding_window=9, logits_soft_cap=6.0, k_scale=0.9, v_scale=1.1)
    out, cache = jax.jit(lambda *a: ragged_page_attention_v3(*a, **opts))(
        *[jnp.asarray(p[n], p["dtype"]) for n in ("q", "k", "v", "cache")],
        *[jnp.asarray(p[n]) for n in ("kv_lens", "tables", "qsl", "dist")], jnp.asarray(sinks))
    want_out, want_cache = reference(p, sinks, scale=0.125, window=9, cap=6.0, k_scale=0.9, v_scale=1.1)
    assert out.dtype == jnp.bfloat16 and cache.dtype == jnp.bfloat16
    assert_rel_l2(cache, want_cache, dtype_name="bfloat16")
    assert_rel_l2(out, want_out, dtype_name="bfloat16")


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
def test_matches_the_seed(rng):
    """Identical without a window. With one, the seed's XLA path starts every query of a chunk
    at kv_len - W (rounded down to its KV block) instead of at the query's own q_pos - W + 1,
    so early queries of a chunked prefill lose keys they should see: ours agree with the seed
    on the tokens that bug does not reach (the first sequence's, the decode step's, and the
    chunk's last token) and with the reference on all."""
    p = problem(rng)
    sinks = rng.standard_normal(8).astype(np.float32)
    rows = slice(0, int(p["qsl"][3]))  # tokens of processed sequences (the seed leaves the rest as they are)
    for window, agree in ((None, rows), (9, np.r_[0:11, 15:17])):
        opts = dict(softmax_scale=0.125, sliding_window=window, logits_soft_cap=6.0)
        out, cache = call(p, sinks, **opts)
        seed_out, seed_cache = seed_oracle.run(
            "ragged_page_attention_v3", p["q"], p["k"], p["v"], p["cache"], p["kv_lens"], p["tables"], p["qsl"],
            p["dist"], sinks, **opts)
        assert_rel_l2(cache, seed_cache)
        assert_rel_l2(np.asarray(out)[agree], seed_out[agree])


def test_refusals(rng):
    p = problem(rng)
    with pytest.raises(ValueError, match="kv_cache: expected"):
        jax.block_until_ready(ragged_page_attention_v3(*[jnp.asarray(p[n]) for n in ("q", "k", "v")], jnp.asarray(p["cache"][..., :64]),
                                 *[jnp.asarray(p[n]) for n in ("kv_lens", "tables", "qsl", "dist")]))
    with pytest.raises(ValueError, match="distribution: expected"):
        jax.block_until_ready(ragged_page_attention_v3(*[jnp.asarray(p[n]) for n in ("q", "k", "v", "cache", "kv_lens", "tables", "qsl")],
                                 jnp.asarray(p["dist"][:2])))
    with pytest.raises(NotImplementedError, match="cfg"):
        jax.block_until_ready(call(p, cfg={"block_q": 8}))
