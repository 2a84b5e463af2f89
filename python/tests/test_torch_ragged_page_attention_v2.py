"""ejk.torch.ragged_page_attention_v2 on CPU tensors against the float64 semantics
(ragged_page_reference.py): a mixed batch with GQA, sinks, softcap and window, bfloat16,
num_seqs as an int, torch.compile (fullgraph), bad metadata named."""
import numpy as np
import pytest

import ragged_page_reference as ref
from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import ragged_page_attention_v2  # noqa: E402

TENSORS = ("queries", "kv_pages", "context_lens", "block_tables", "query_start_loc", "num_seqs")


def tensors(x, dtype):
    t = [torch.from_numpy(x[n]).to(dtype) if x[n].dtype == np.float64 else torch.from_numpy(x[n]) for n in TENSORS]
    return t + ([torch.from_numpy(x["softmax_aux"]).float()] if "softmax_aux" in x else [])


def want(t, **opts):
    return ref.ragged_page_attention_v2(*[a.double().numpy() if a.is_floating_point() else a.numpy() for a in t],
                                        **opts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_forward(rng, dtype):
    opts = dict(logits_soft_cap=15.0, sliding_window=21)
    t = tensors(ref.random_problem(rng, hq=8, hkv=2, d=128, sinks=True), dtype)
    got = ragged_page_attention_v2(*t, **opts)
    assert got.dtype == dtype and got.shape == t[0].shape
    assert_rel_l2(got, want(t, **opts), "float32" if dtype == torch.float32 else "bfloat16")


def test_num_seqs_as_int(rng):
    t = tensors(ref.random_problem(rng, q_lens=(2, 1, 4), hq=4, hkv=1, d=64), torch.float32)
    assert_rel_l2(ragged_page_attention_v2(*t[:5], 3), want(t))


def test_torch_compile_fullgraph(rng):
    t = tensors(ref.random_problem(rng, hq=4, hkv=1, d=64), torch.float32)
    fn = torch.compile(lambda *a: ragged_page_attention_v2(*a, softmax_scale=0.2), fullgraph=True)
    assert_rel_l2(fn(*t), want(t, softmax_scale=0.2))


def test_bad_metadata_is_named(rng):
    x = ref.random_problem(rng, hq=4, hkv=2, d=64)
    x["context_lens"][1] = 10_000
    with pytest.raises(Exception, match=r"context_lens\[1\]"):
        ragged_page_attention_v2(*tensors(x, torch.float32))
