"""ejk.torch.prefill_page_attention and ejk.torch.unified_attention on CPU tensors against the
float64 semantics (ragged_page_reference.py): GQA, window, softcap, ALiBi, qq_bias, sinks,
bfloat16, torch.compile (fullgraph), bad metadata named."""
import numpy as np
import pytest

import ragged_page_reference as ref
from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import prefill_page_attention, unified_attention  # noqa: E402

PREFILL = ("query", "key_cache", "value_cache", "context_len", "page_indices")
UNIFIED = ("queries", "key_cache", "value_cache", "kv_lens", "block_tables", "query_start_loc", "alibi_slopes",
           "qq_bias", "softmax_aux")


def tensors(x, names, dtype):
    out = []
    for n in names:
        if n not in x:
            out.append(None)
        elif n in ("alibi_slopes", "qq_bias", "softmax_aux"):
            out.append(torch.from_numpy(x[n]).float())
        else:
            out.append(torch.from_numpy(x[n]).to(dtype) if x[n].dtype == np.float64 else torch.from_numpy(x[n]))
    return out


def f64(t):
    return [None if a is None else a.double().numpy() if a.is_floating_point() else a.numpy() for a in t]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_prefill(rng, dtype):
    opts = dict(attn_logits_soft_cap=12.0, sliding_window=9)
    t = tensors(ref.random_prefill(rng, c=10, hq=8, hkv=2, d=128, ps=4, num_pages=8), PREFILL, dtype)
    got = prefill_page_attention(*t, **opts)
    assert got.dtype == dtype and got.shape == t[0].shape
    assert_rel_l2(got, ref.prefill_page_attention(*f64(t), **opts), "float32" if dtype == torch.float32 else "bfloat16")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_unified(rng, dtype):
    opts = dict(sliding_window=13, logits_soft_cap=30.0)
    t = tensors(ref.random_unified(rng, hq=8, hkv=2, d=64, ps=8, bias=True), UNIFIED, dtype)
    got = unified_attention(*t, **opts)
    assert got.dtype == dtype and got.shape == t[0].shape
    assert_rel_l2(got, ref.unified_attention(*f64(t), **opts), "float32" if dtype == torch.float32 else "bfloat16")


def test_torch_compile_fullgraph(rng):
    t = tensors(ref.random_unified(rng, hq=4, hkv=1, d=64, bias=True), UNIFIED, torch.float32)
    fn = torch.compile(lambda *a: unified_attention(*a, softmax_scale=0.2), fullgraph=True)
    assert_rel_l2(fn(*t), ref.unified_attention(*f64(t), softmax_scale=0.2))


def test_bad_metadata_is_named(rng):
    x = ref.random_prefill(rng, context=40)
    x["page_indices"][0] = -3
    with pytest.raises(Exception, match=r"page_indices\[0\]"):
        prefill_page_attention(*tensors(x, PREFILL, torch.float32))
    x = ref.random_unified(rng)
    x["query_start_loc"][2] = 0
    with pytest.raises(Exception, match=r"query_start_loc\[2\]"):
        unified_attention(*tensors(x, UNIFIED, torch.float32))
