"""ejk.jax.prefill_page_attention under jax.jit against the float64 semantics
(ragged_page_reference.py): GQA, MQA, a chunk that is the whole context, a context shorter than a
page, window, softcap, a scale, bfloat16; the seed's signature; bad metadata named."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ragged_page_reference as ref
from ejk.jax import prefill_page_attention
from torch_support import assert_rel_l2

TENSORS = ("query", "key_cache", "value_cache", "context_len", "page_indices")
CASES = {
    "gqa4": dict(shape=dict(hq=8, hkv=2, d=128), opts={}),
    "mqa_window_cap": dict(shape=dict(c=12, hq=6, hkv=1, d=64, ps=4, num_pages=9),
                           opts=dict(attn_logits_soft_cap=10.0, sliding_window=5)),
    "whole_context_in_a_page": dict(shape=dict(c=5, hq=4, hkv=4, d=64, ps=16, context=5), opts=dict(softmax_scale=0.4)),
    "page1": dict(shape=dict(c=3, hq=4, hkv=2, d=64, ps=1, num_pages=20), opts=dict(sliding_window=4)),
}


def arrays(x, dtype):
    return [jnp.asarray(x[n], dtype) if x[n].dtype == np.float64 else jnp.asarray(x[n]) for n in TENSORS]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_forward(rng, name, dtype):
    case = CASES[name]
    a = arrays(ref.random_prefill(rng, **case["shape"]), dtype)
    got = jax.jit(lambda *t: prefill_page_attention(*t, **case["opts"]))(*a)
    assert got.shape == a[0].shape and got.dtype == dtype
    want = ref.prefill_page_attention(*[np.asarray(t, np.float64) if t.dtype != jnp.int32 else np.asarray(t)
                                        for t in a], **case["opts"])
    assert_rel_l2(got, want, "float32" if dtype == jnp.float32 else "bfloat16")


def test_signature_is_the_seeds():
    params = inspect.signature(prefill_page_attention).parameters
    assert list(params)[:5] == list(TENSORS)
    assert all(params[n].kind == inspect.Parameter.POSITIONAL_ONLY for n in TENSORS)
    assert list(params)[5:] == ["softmax_scale", "mask_value", "attn_logits_soft_cap", "sliding_window", "platform",
                                "cfg"]


def test_bad_metadata_is_named(rng):
    x = ref.random_prefill(rng, context=40)
    x["page_indices"][1] = 10_000
    with pytest.raises(Exception, match=r"page_indices\[1\]"):
        jax.block_until_ready(prefill_page_attention(*arrays(x, jnp.float32)))
    x = ref.random_prefill(rng)
    x["context_len"][0] = 10_000
    with pytest.raises(Exception, match="context_len"):
        jax.block_until_ready(prefill_page_attention(*arrays(x, jnp.float32)))
    x = ref.random_prefill(rng, hq=3, hkv=2)
    with pytest.raises(Exception, match="multiple of key_cache"):
        jax.block_until_ready(prefill_page_attention(*arrays(x, jnp.float32)))
