"""ejk.jax.chunked_prefill_paged_decode under jax.jit against the float64 semantics
(decode_reference.py): mixed prefill and decode batches, causal and not, window, ALiBi, sinks,
softcap, GQA 1, 4 and 8, block sizes 1, 16 and 64; the caches' new contents exactly; donated
caches; the seed's XLA path on identical inputs; its signature."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import decode_reference as ref
import seed_oracle
from ejk.jax import chunked_prefill_paged_decode
from torch_support import assert_rel_l2

TENSORS = ("queries", "keys", "values", "key_cache", "value_cache", "kv_lens", "block_tables", "query_start_loc")
EXTRAS = ("alibi_slopes", "softmax_aux")
CASES = {
    "gqa4_bs16": dict(shape=dict(hq=8, hkv=2, bs=16), opts={}),
    "gqa1_bs1_window": dict(shape=dict(hq=4, hkv=4, bs=1, max_blocks=40), opts=dict(sliding_window=7)),
    "gqa8_bs64_bias_cap": dict(shape=dict(hq=8, hkv=1, bs=64, max_blocks=2, bias=True),
                               opts=dict(logits_soft_cap=6.0, softmax_scale=0.3)),
    "non_causal_bias_window": dict(shape=dict(hq=8, hkv=2, bs=16, bias=True),
                                   opts=dict(causal=False, sliding_window=12)),
    "non_causal_gqa1": dict(shape=dict(hq=4, hkv=4, bs=1, max_blocks=30), opts=dict(causal=False)),
}


def arrays(x, dtype):
    a = [jnp.asarray(x[n], dtype) if x[n].dtype == np.float64 else jnp.asarray(x[n]) for n in TENSORS]
    return a + [jnp.asarray(x[n], jnp.float32) if n in x else None for n in EXTRAS]


def f64(a):
    return [None if t is None else np.asarray(t, np.float64) if jnp.issubdtype(t.dtype, jnp.floating)
            else np.asarray(t) for t in a]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_forward_and_cache_write(rng, name, dtype):
    case = CASES[name]
    a = arrays(ref.random_chunked(rng, **case["shape"]), dtype)
    want_out, want_kc, want_vc = ref.chunked_prefill_paged_decode(*f64(a), **case["opts"])
    out, kc, vc = jax.jit(lambda *t: chunked_prefill_paged_decode(*t, **case["opts"]))(*a)
    assert out.shape == a[0].shape and out.dtype == dtype and kc.dtype == dtype and vc.dtype == dtype
    # The write is a copy of this call's rows: exact, every other row untouched.
    assert np.array_equal(np.asarray(kc, np.float64), want_kc)
    assert np.array_equal(np.asarray(vc, np.float64), want_vc)
    assert_rel_l2(out, want_out, "float32" if dtype == jnp.float32 else "bfloat16")


def test_donated_caches(rng):
    a = arrays(ref.random_chunked(rng), jnp.float32)
    want = ref.chunked_prefill_paged_decode(*f64(a))
    fn = jax.jit(chunked_prefill_paged_decode, donate_argnums=(3, 4))
    out, kc, vc = fn(*a)
    assert a[3].is_deleted() and a[4].is_deleted()
    assert np.array_equal(np.asarray(kc, np.float64), want[1]) and np.array_equal(np.asarray(vc, np.float64), want[2])
    assert_rel_l2(out, want[0])


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed ejkernel installed")
@pytest.mark.parametrize("name", ["gqa4_bs16", "gqa1_bs1_window", "gqa8_bs64_bias_cap"])
def test_matches_the_seed(rng, name):
    case = CASES[name]
    x = ref.random_chunked(rng, **case["shape"])
    x["block_tables"] = np.maximum(x["block_tables"], 0)  # the seed gathers every entry
    a = [np.asarray(x[n], np.float32) if x[n].dtype == np.float64 else x[n] for n in TENSORS]
    a += [np.asarray(x[n], np.float32) if n in x else None for n in EXTRAS]
    got = chunked_prefill_paged_decode(*a, **case["opts"])
    seed = seed_oracle.run("chunked_prefill_paged_decode", *a, **case["opts"])
    assert np.array_equal(np.asarray(got[1]), seed[1]) and np.array_equal(np.asarray(got[2]), seed[2])
    assert_rel_l2(got[0], seed[0].astype(np.float64))


def test_signature_is_the_seeds():
    params = inspect.signature(chunked_prefill_paged_decode).parameters
    assert list(params)[:10] == list(TENSORS + EXTRAS)
    assert all(params[n].kind == inspect.Parameter.POSITIONAL_ONLY for n in list(params)[:10])
    assert list(params)[10:] == ["softmax_scale", "causal", "sliding_window", "logits_soft_cap", "seq_threshold_3d",
                                 "num_par_softmax_segments", "platform", "mesh", "in_specs", "out_specs", "cfg"]


def test_bad_arguments_are_named(rng):
    x = ref.random_chunked(rng)
    x["kv_lens"][1] = 3  # fewer positions than its 9 query tokens
    with pytest.raises(Exception, match=r"kv_lens\[1\]"):
        jax.block_until_ready(chunked_prefill_paged_decode(*arrays(x, jnp.float32)))
    a = arrays(ref.random_chunked(rng), jnp.float32)
    with pytest.raises(ValueError, match="value_cache"):
        chunked_prefill_paged_decode(*a[:4], a[4][:, :8], *a[5:])
    with pytest.raises(Exception, match="causal"):
        chunked_prefill_paged_decode(*a, causal="no")
