"""ejk.torch.page_attention on CPU tensors against the float64 semantics (page_reference.py):
GQA, softcap and sliding window, bfloat16, torch.compile (fullgraph), opcheck, bad metadata
named."""
import numpy as np
import pytest

import page_reference
from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import page_attention  # noqa: E402

TENSORS = ("query", "key_cache", "value_cache", "context_lens", "block_tables")


def tensors(x, dtype):
    return [torch.from_numpy(x[n]).to(dtype) if x[n].dtype == np.float64 else torch.from_numpy(x[n]) for n in TENSORS]


def want(t, **opts):
    return page_reference.page_attention(*[a.double().numpy() if a.is_floating_point() else a.numpy() for a in t],
                                         **opts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_forward(rng, dtype):
    opts = dict(attn_logits_soft_cap=15.0, sliding_window=41)
    t = tensors(page_reference.random_problem(rng, hq=8, hkv=2, d=128, bs=16), dtype)
    got = page_attention(*t, **opts)
    assert got.dtype == dtype and got.shape == t[0].shape
    assert_rel_l2(got, want(t, **opts), "float32" if dtype == torch.float32 else "bfloat16")


def test_torch_compile_fullgraph(rng):
    t = tensors(page_reference.random_problem(rng, hq=4, hkv=1, d=64, bs=16), torch.float32)
    fn = torch.compile(lambda *a: page_attention(*a, attn_scale=0.2), fullgraph=True)
    assert_rel_l2(fn(*t), want(t, attn_scale=0.2))


def test_opcheck(rng):
    t = tensors(page_reference.random_problem(rng, s=3, hq=4, hkv=2, d=64, bs=16, max_blocks=2), torch.float32)
    torch.library.opcheck(torch.ops.ejk.page_attention.default, tuple(t) + (0.2, None, None, None, 0))


def test_bad_metadata_is_named(rng):
    x = page_reference.random_problem(rng, hq=4, hkv=2, d=64, bs=16)
    x["context_lens"][2] = 10_000
    with pytest.raises(Exception, match=r"context_lens\[2\]"):
        page_attention(*tensors(x, torch.float32))
