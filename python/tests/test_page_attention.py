"""ejk.jax.page_attention under jax.jit against the float64 semantics (page_reference.py): GQA
ratios, block sizes, lengths 0 and 1, softcap, sliding window, max_context_len, a scale,
bfloat16; the seed's signature; bad metadata named."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import page_reference
from ejk.jax import page_attention
from torch_support import assert_rel_l2, no_cpu_jit

TENSORS = ("query", "key_cache", "value_cache", "context_lens", "block_tables")
CASES = {
    "mha_bs16": dict(shape=dict(hq=4, hkv=4, d=64, bs=16), opts={}),
    "gqa4_softcap_window": dict(shape=dict(hq=8, hkv=2, d=128, bs=16),
                                opts=dict(attn_logits_soft_cap=20.0, sliding_window=37)),
    "gqa6_bs1_scale": dict(shape=dict(hq=6, hkv=1, d=64, bs=1, max_blocks=40), opts=dict(attn_scale=0.3)),
    "max_context_len": dict(shape=dict(hq=4, hkv=2, d=64, bs=4), opts=dict(max_context_len=9)),
}


def arrays(x, dtype):
    return [jnp.asarray(x[n], dtype) if x[n].dtype == np.float64 else jnp.asarray(x[n]) for n in TENSORS]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_forward(rng, name, dtype):
    case = CASES[name]
    x = page_reference.random_problem(rng, **case["shape"])
    a = arrays(x, dtype)
    got = jax.jit(lambda *t: page_attention(*t, **case["opts"]))(*a)
    assert got.shape == a[0].shape and got.dtype == dtype
    want = page_reference.page_attention(*[np.asarray(t, np.float64) if t.dtype != jnp.int32 else np.asarray(t)
                                           for t in a], **case["opts"])
    assert_rel_l2(got, want, "float32" if dtype == jnp.float32 else "bfloat16")


@pytest.mark.skipif(bool(no_cpu_jit()), reason=f"head dim 40 is not built in: {no_cpu_jit()}")
def test_a_head_dim_the_jit_builds(rng):
    x = page_reference.random_problem(rng, hq=5, hkv=5, d=40, bs=3)
    a = arrays(x, jnp.float32)
    assert_rel_l2(page_attention(*a), page_reference.page_attention(*[np.asarray(t) for t in a]))


def test_signature_is_the_seeds():
    params = inspect.signature(page_attention).parameters
    assert list(params)[:5] == list(TENSORS)
    assert all(params[n].kind == inspect.Parameter.POSITIONAL_ONLY for n in TENSORS)
    assert list(params)[5:] == ["attn_scale", "max_context_len", "num_splits", "mask_value", "attn_logits_soft_cap",
                                "pages_per_compute_block", "megacore_mode", "inline_seq_dim", "sliding_window",
                                "platform", "cfg"]
    assert params["num_splits"].default == 0 and params["inline_seq_dim"].default is True


def test_bad_metadata_is_named(rng):
    x = page_reference.random_problem(rng, hq=4, hkv=2, d=64, bs=16)
    x["block_tables"][3, 0] = 10_000
    with pytest.raises(Exception, match=r"block_tables\[3, 0\]"):
        jax.block_until_ready(page_attention(*arrays(x, jnp.float32)))
    x = page_reference.random_problem(rng, hq=3, hkv=2, d=64, bs=16)
    with pytest.raises(Exception, match="multiple of key_cache"):
        jax.block_until_ready(page_attention(*arrays(x, jnp.float32)))
    with pytest.raises(NotImplementedError, match="inline_seq_dim"):
        jax.block_until_ready(page_attention(*arrays(page_reference.random_problem(rng), jnp.float32), inline_seq_dim=False))
