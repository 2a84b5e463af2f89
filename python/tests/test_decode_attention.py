"""ejk.jax.decode_attention under jax.jit against the float64 semantics (decode_reference.py):
GQA 1, 4 and 8, page sizes 1 (the seed's default), 16 and 64, contexts empty and not multiples
of the page, softcap, bfloat16; the log-sum-exp; the seed's XLA path on identical inputs; its
signature; bad arguments named."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import decode_reference as ref
import seed_oracle
from ejk.jax import decode_attention
from torch_support import assert_rel_l2

TENSORS = ("query", "key_buffer", "value_buffer", "req_to_tokens", "seq_lens")
GQA = {"gqa1": (4, 4), "gqa4": (8, 2), "gqa8": (8, 1)}


def arrays(x, dtype):
    return [jnp.asarray(x[n], dtype) if x[n].dtype == np.float64 else jnp.asarray(x[n]) for n in TENSORS]


def f64(a):
    return [np.asarray(t, np.float64) if jnp.issubdtype(t.dtype, jnp.floating) else np.asarray(t) for t in a]


@pytest.mark.parametrize("ps", [1, 16, 64])
@pytest.mark.parametrize("gqa", GQA)
def test_forward_f32(rng, gqa, ps):
    hq, hkv = GQA[gqa]
    a = arrays(ref.random_decode(rng, b=5, hq=hq, hkv=hkv, d=64, ps=ps, context=100), jnp.float32)
    out, lse = jax.jit(lambda *t: decode_attention(*t, page_size=ps))(*a)
    assert out.shape == a[0].shape and out.dtype == jnp.float32 and lse.shape == a[0].shape[:2]
    assert lse.dtype == jnp.float32
    want_out, want_lse = ref.decode_attention(*f64(a), page_size=ps)
    assert np.isneginf(want_lse[0]).all() and not np.asarray(out[0]).any()  # the empty context
    assert_rel_l2(out, want_out)
    assert_rel_l2(lse, want_lse)


@pytest.mark.parametrize("ps", [1, 16])
def test_softcap_scale_bf16(rng, ps):
    a = arrays(ref.random_decode(rng, b=4, hq=12, hkv=2, d=128, ps=ps, context=70), jnp.bfloat16)
    opts = dict(page_size=ps, softmax_scale=0.2, logits_soft_cap=4.0)
    out, lse = jax.jit(lambda *t: decode_attention(*t, **opts))(*a)
    assert out.dtype == jnp.bfloat16
    want_out, want_lse = ref.decode_attention(*f64(a), **opts)
    assert_rel_l2(out, want_out, "bfloat16")
    assert_rel_l2(lse, want_lse, "bfloat16")


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed ejkernel installed")
@pytest.mark.parametrize("ps,cap", [(1, None), (16, 8.0), (64, None)])
def test_matches_the_seed(rng, ps, cap):
    x = ref.random_decode(rng, b=4, hq=8, hkv=2, d=64, ps=ps, context=90)
    x["req_to_tokens"] = np.maximum(x["req_to_tokens"], 0)  # the seed gathers every entry
    a = [np.asarray(x[n], np.float32) if x[n].dtype == np.float64 else x[n] for n in TENSORS]
    out, lse = decode_attention(*a, page_size=ps, logits_soft_cap=cap)
    seed_out, seed_lse = seed_oracle.run("decode_attention", *a, page_size=ps, logits_soft_cap=cap)
    assert_rel_l2(out, seed_out.astype(np.float64))
    assert_rel_l2(lse, seed_lse.astype(np.float64))


def test_signature_is_the_seeds():
    params = inspect.signature(decode_attention).parameters
    assert list(params)[:5] == list(TENSORS)
    assert all(params[n].kind == inspect.Parameter.POSITIONAL_ONLY for n in TENSORS)
    assert list(params)[5:] == ["softmax_scale", "num_kv_splits", "page_size", "logits_soft_cap", "platform", "mesh",
                                "in_specs", "out_specs", "cfg"]
    assert params["page_size"].default == 1


def test_bad_arguments_are_named(rng):
    a = arrays(ref.random_decode(rng, b=3, ps=4, context=20), jnp.float32)
    with pytest.raises(Exception, match="total_tokens.*multiple of page_size"):
        jax.block_until_ready(decode_attention(*a, page_size=7))
    lens = np.asarray(a[4]).copy()
    lens[1] = 21
    with pytest.raises(Exception, match=r"seq_lens\[1\]"):
        jax.block_until_ready(decode_attention(*a[:4], jnp.asarray(lens), page_size=4))
    tables = np.asarray(a[3]).copy()
    tables[2, 0] = 10_000
    with pytest.raises(Exception, match=r"req_to_tokens\[2, 0\]"):
        jax.block_until_ready(decode_attention(*a[:3], jnp.asarray(tables), a[4], page_size=4))
