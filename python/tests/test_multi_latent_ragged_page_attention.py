"""ejk.jax.multi_latent_ragged_page_attention and _v2 (the latent cache write, then latent
attention over it): the updated cache and the output against a float64 NumPy reference of the
seed's definition (prefill, chunked prefill, decode and empty sequences in one call, inactive
rows of the tables, a token past every sequence, 8 to 128 heads, a window, a soft cap, q/k/v
scales, float32 and bfloat16, other latent and rope dims), against the seed itself on identical
inputs, and the refusals."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import seed_oracle
from mla_page_reference import problem as numpy_problem, reference
from ejk.jax import multi_latent_ragged_page_attention, multi_latent_ragged_page_attention_v2
from torch_support import assert_rel_l2, no_cpu_jit

NAMES = ("qn", "qp", "kv", "kp", "cache", "kv_lens", "tables", "qsl", "dist")


def problem(rng, dtype=jnp.float32, **kw):
    """The reference's problem with its floats rounded to dtype (kept as float32 arrays)."""
    p = numpy_problem(rng, pack=1 if dtype == jnp.float32 else 2, **kw)
    for n in ("qn", "qp", "kv", "kp", "cache"):
        p[n] = np.asarray(jnp.asarray(p[n], dtype).astype(jnp.float32))
    p["dtype"] = dtype
    return p


def arrays(p):
    return [jnp.asarray(p[n], p["dtype"]) for n in NAMES[:5]] + [jnp.asarray(p[n]) for n in NAMES[5:]]


@pytest.mark.parametrize("hq", [8, 16, 20, 128])
def test_matches_the_reference(rng, hq):
    p = problem(rng, hq=hq)
    out, cache = multi_latent_ragged_page_attention(*arrays(p))
    want_out, want_cache = reference(p)
    assert_rel_l2(cache, want_cache)
    assert_rel_l2(out, want_out)


def test_window_cap_scales_bfloat16_jit_and_v2(rng):
    p = problem(rng, dtype=jnp.bfloat16)
    opts = dict(softmax_scale=0.05, sliding_window=9, logits_soft_cap=6.0, q_scale=0.8, k_scale=0.9, v_scale=1.1,
                mask_value=-1e9)
    for fn in (multi_latent_ragged_page_attention, multi_latent_ragged_page_attention_v2):
        out, cache = jax.jit(lambda *a: fn(*a, **opts))(*arrays(p))
        want_out, want_cache = reference(p, scale=0.05, window=9, cap=6.0, q_scale=0.8, k_scale=0.9, v_scale=1.1)
        assert out.dtype == jnp.bfloat16 and cache.dtype == jnp.bfloat16
        assert_rel_l2(cache, want_cache, dtype_name="bfloat16")
        assert_rel_l2(out, want_out, dtype_name="bfloat16")


def test_a_donated_cache_is_written_in_place(rng):
    p = problem(rng)
    a = arrays(p)
    out, cache = jax.jit(lambda *x: multi_latent_ragged_page_attention(*x), donate_argnums=4)(*a)
    assert a[4].is_deleted()
    want_out, want_cache = reference(p)
    assert_rel_l2(cache, want_cache)
    assert_rel_l2(out, want_out)


@pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")
def test_other_latent_and_rope_dims(rng):
    p = problem(rng, hq=12, r=96, e=40, page=6)
    out, cache = multi_latent_ragged_page_attention(*arrays(p), sliding_window=5)
    want_out, want_cache = reference(p, window=5)
    assert_rel_l2(cache, want_cache)
    assert_rel_l2(out, want_out)


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
@pytest.mark.parametrize("name", ["multi_latent_ragged_page_attention", "multi_latent_ragged_page_attention_v2"])
def test_matches_the_seed(rng, name):
    """The seed's output on the processed tokens and its whole updated cache, float32 and
    bfloat16, with a window, a soft cap and the scales."""
    for dtype in (jnp.float32, jnp.bfloat16):
        p = problem(rng, dtype=dtype)
        opts = dict(sliding_window=9, logits_soft_cap=6.0, q_scale=0.8, k_scale=0.9, v_scale=1.1)
        fn = {"multi_latent_ragged_page_attention": multi_latent_ragged_page_attention,
              "multi_latent_ragged_page_attention_v2": multi_latent_ragged_page_attention_v2}[name]
        out, cache = fn(*arrays(p), **opts)
        host = [np.asarray(a) for a in arrays(p)]
        seed_out, seed_cache = seed_oracle.run(name, *host, **opts)
        dt = "float32" if dtype == jnp.float32 else "bfloat16"
        assert_rel_l2(cache, seed_cache.astype(np.float32), dtype_name=dt)
        assert_rel_l2(out, seed_out.astype(np.float32), dtype_name=dt)


def test_table_rows_padded_with_a_used_page(rng):
    """Unused table entries that repeat a page the sequence uses (zero padding, with page 0 in
    use): only this call's rows are written. The seed's XLA path gathers the row's pages, writes
    into the first copy and scatters every copy back, so a later stale copy can undo the write
    (it does on the CPU); its attention output is unaffected."""
    p = problem(rng)
    tables = p["tables"].reshape(5, -1).copy()
    tables[0, 2:] = tables[0, 0]  # sequence 0 (11 positions) needs two pages of 8
    p["tables"] = tables.reshape(-1)
    out, cache = multi_latent_ragged_page_attention(*arrays(p))
    want_out, want_cache = reference(p)
    assert_rel_l2(cache, want_cache)
    assert_rel_l2(out, want_out)


def test_refusals(rng):
    p = problem(rng)
    a = arrays(p)
    with pytest.raises(ValueError, match="kv_cache: expected"):
        multi_latent_ragged_page_attention(*a[:4], a[4][..., :512], *a[5:])
    with pytest.raises(ValueError, match="keys_values, keys_pe: expected"):
        multi_latent_ragged_page_attention(a[0], a[1], a[2][:, :64], *a[3:])
    with pytest.raises(ValueError, match="distribution"):
        multi_latent_ragged_page_attention(*a[:8], a[8][:2])
    with pytest.raises(NotImplementedError, match="platform"):
        multi_latent_ragged_page_attention(*a, platform="pallas")
    bad = list(a)
    bad[5] = jnp.asarray(np.asarray(p["kv_lens"]) - np.asarray([1, 0, 0, 0, 0], np.int32))  # fewer than its 11 tokens
    with pytest.raises(Exception, match=r"kv_lens\[0\]"):
        jax.block_until_ready(multi_latent_ragged_page_attention(*bad))
