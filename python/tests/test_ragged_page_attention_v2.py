"""ejk.jax.ragged_page_attention_v2 under jax.jit against the float64 semantics
(ragged_page_reference.py): decode, prefill chunks and empty query ranges in one batch, a
context shorter than a page, num_seqs below the tables' rows, tokens past every sequence, GQA,
MQA, window, sinks, softcap, a scale, bfloat16; the seed's signature; bad metadata named."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ragged_page_reference as ref
from ejk.jax import ragged_page_attention_v2
from torch_support import assert_rel_l2

TENSORS = ("queries", "kv_pages", "context_lens", "block_tables", "query_start_loc", "num_seqs")
CASES = {
    "gqa4": dict(shape=dict(hq=8, hkv=2, d=128), opts={}),
    "mha_softcap_window": dict(shape=dict(hq=4, hkv=4, d=64, ps=8), opts=dict(logits_soft_cap=20.0, sliding_window=9)),
    "mqa_sinks_scale": dict(shape=dict(hq=6, hkv=1, d=64, ps=4, sinks=True), opts=dict(softmax_scale=0.3)),
    "page1_window_sinks": dict(shape=dict(hq=4, hkv=2, d=64, ps=1, max_pages=40, sinks=True),
                               opts=dict(sliding_window=3)),
}


def arrays(x, dtype):
    names = TENSORS + (("softmax_aux",) if "softmax_aux" in x else ())
    return [jnp.asarray(x[n], dtype) if x[n].dtype == np.float64 and n != "softmax_aux" else jnp.asarray(x[n])
            for n in names]


def f64(a):
    return [np.asarray(t, np.float64) if jnp.issubdtype(t.dtype, jnp.floating) else np.asarray(t) for t in a]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_forward(rng, name, dtype):
    case = CASES[name]
    x = ref.random_problem(rng, **case["shape"])
    a = arrays(x, dtype)
    got = jax.jit(lambda *t: ragged_page_attention_v2(*t, **case["opts"]))(*a)
    assert got.shape == a[0].shape and got.dtype == dtype
    want = ref.ragged_page_attention_v2(*f64(a), **case["opts"])
    assert np.abs(want[-2:]).max() == 0 and np.all(np.asarray(got[-2:], np.float32) == 0)  # tokens of no sequence
    assert_rel_l2(got, want, "float32" if dtype == jnp.float32 else "bfloat16")


def test_num_seqs_as_int_and_0d(rng):
    x = ref.random_problem(rng, q_lens=(3, 1), hq=4, hkv=2)
    a = arrays(x, jnp.float32)
    want = ref.ragged_page_attention_v2(*f64(a))
    for n in (2, jnp.asarray(2, jnp.int32)):
        assert_rel_l2(ragged_page_attention_v2(*a[:5], n), want)
    # Fewer sequences: the second's tokens are left 0.
    got = np.asarray(ragged_page_attention_v2(*a[:5], 1))
    assert_rel_l2(got[:3], want[:3])
    assert np.all(got[3:] == 0)


def test_signature_is_the_seeds():
    params = inspect.signature(ragged_page_attention_v2).parameters
    assert list(params)[:7] == list(TENSORS) + ["softmax_aux"]
    assert all(params[n].kind == inspect.Parameter.POSITIONAL_ONLY for n in list(params)[:7])
    assert list(params)[7:] == ["softmax_scale", "logits_soft_cap", "compute_dtype", "optimized", "sliding_window",
                                "mask_value", "vmem_limit_bytes", "platform", "cfg", "mesh", "in_specs", "out_specs"]


def test_bad_metadata_is_named(rng):
    x = ref.random_problem(rng)
    x["block_tables"][3, 0] = 10_000
    with pytest.raises(Exception, match=r"block_tables\[3, 0\]"):
        jax.block_until_ready(ragged_page_attention_v2(*arrays(x, jnp.float32)))
    x = ref.random_problem(rng)
    x["context_lens"][4] = 2  # fewer positions than its 12 query tokens
    with pytest.raises(Exception, match=r"context_lens\[4\]"):
        jax.block_until_ready(ragged_page_attention_v2(*arrays(x, jnp.float32)))
    x = ref.random_problem(rng)
    x["query_start_loc"][2] = 0
    with pytest.raises(Exception, match=r"query_start_loc\[2\]"):
        jax.block_until_ready(ragged_page_attention_v2(*arrays(x, jnp.float32)))
    x = ref.random_problem(rng)
    x["num_seqs"][0] = 99
    with pytest.raises(Exception, match="num_seqs"):
        jax.block_until_ready(ragged_page_attention_v2(*arrays(x, jnp.float32)))
    x = ref.random_problem(rng, hq=3, hkv=2)
    with pytest.raises(Exception, match="multiple of Hkv"):
        jax.block_until_ready(ragged_page_attention_v2(*arrays(x, jnp.float32)))
