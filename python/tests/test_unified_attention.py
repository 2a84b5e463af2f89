"""ejk.jax.unified_attention under jax.jit against the float64 semantics
(ragged_page_reference.py): a mixed batch (decode, prefill chunks, an empty query range) over a
token-major cache, GQA, MQA, ALiBi, qq_bias, sinks, window, softcap, bfloat16; the seed's
signature and its "off" values; bad metadata named. causal=False is checked through
chunked_prefill_paged_decode (test_chunked_prefill_paged_decode.py), which calls this op."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ragged_page_reference as ref
from ejk.jax import unified_attention
from torch_support import assert_rel_l2

TENSORS = ("queries", "key_cache", "value_cache", "kv_lens", "block_tables", "query_start_loc")
EXTRAS = ("alibi_slopes", "qq_bias", "softmax_aux")
CASES = {
    "gqa4": dict(shape=dict(hq=8, hkv=2, d=128), opts={}),
    "gqa_bias_window_cap": dict(shape=dict(hq=8, hkv=2, d=64, ps=8, bias=True),
                                opts=dict(sliding_window=11, logits_soft_cap=25.0)),
    "mqa_bias_scale": dict(shape=dict(hq=6, hkv=1, d=64, ps=4, bias=True), opts=dict(softmax_scale=0.3)),
}


def arrays(x, dtype):
    a = [jnp.asarray(x[n], dtype) if x[n].dtype == np.float64 else jnp.asarray(x[n]) for n in TENSORS]
    return a + [jnp.asarray(x[n], jnp.float32) if n in x else None for n in EXTRAS]


def f64(a):
    return [None if t is None else np.asarray(t, np.float64) if jnp.issubdtype(t.dtype, jnp.floating)
            else np.asarray(t) for t in a]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_forward(rng, name, dtype):
    case = CASES[name]
    a = arrays(ref.random_unified(rng, **case["shape"]), dtype)
    got = jax.jit(lambda *t: unified_attention(*t, **case["opts"]))(*a)
    assert got.shape == a[0].shape and got.dtype == dtype
    want = ref.unified_attention(*f64(a), **case["opts"])
    assert_rel_l2(got, want, "float32" if dtype == jnp.float32 else "bfloat16")


def test_off_values_are_the_seeds(rng):
    a = arrays(ref.random_unified(rng, hq=4, hkv=2, d=64), jnp.float32)
    assert_rel_l2(unified_attention(*a, sliding_window=0, logits_soft_cap=0.0), ref.unified_attention(*f64(a)))


def test_signature_is_the_seeds():
    params = inspect.signature(unified_attention).parameters
    assert list(params)[:9] == list(TENSORS + EXTRAS)
    assert all(params[n].kind == inspect.Parameter.POSITIONAL_ONLY for n in list(params)[:9])
    assert list(params)[9:] == ["softmax_scale", "causal", "sliding_window", "logits_soft_cap", "seq_threshold_3d",
                                "platform", "mesh", "in_specs", "out_specs", "cfg"]


def test_bad_metadata_is_named(rng):
    x = ref.random_unified(rng)
    x["kv_lens"][4] = 2  # fewer positions than its 12 query tokens
    with pytest.raises(Exception, match=r"kv_lens\[4\]"):
        jax.block_until_ready(unified_attention(*arrays(x, jnp.float32)))
    x = ref.random_unified(rng)
    x["block_tables"][3, 0] = 10_000
    with pytest.raises(Exception, match=r"block_tables\[3, 0\]"):
        jax.block_until_ready(unified_attention(*arrays(x, jnp.float32)))
    x = ref.random_unified(rng, hq=3, hkv=2)
    with pytest.raises(Exception, match="multiple of key_cache"):
        jax.block_until_ready(unified_attention(*arrays(x, jnp.float32)))
