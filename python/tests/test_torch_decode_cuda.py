"""ejk.torch.decode_attention and ejk.torch.chunked_prefill_paged_decode on CUDA tensors (the
metadata on the device too) against the float64 references (decode_reference.py): out and lse,
GQA 1, 4 and 8, page sizes 1, 16 and 64, empty contexts; the caches' new rows exactly, causal
and not, with a window, ALiBi, sinks and a soft cap. Skipped, saying why, where torch has no GPU."""
import numpy as np
import pytest

import decode_reference as ref
from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import chunked_prefill_paged_decode, decode_attention  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch "
                                f"(torch {torch.__version__}, CUDA {torch.version.cuda})")
DECODE = ("query", "key_buffer", "value_buffer", "req_to_tokens", "seq_lens")
CHUNKED = ("queries", "keys", "values", "key_cache", "value_cache", "kv_lens", "block_tables", "query_start_loc",
           "alibi_slopes", "softmax_aux")


def on_gpu(x, names, dtype):
    def one(a):
        t = torch.from_numpy(np.ascontiguousarray(a))
        return (t.to(dtype) if a.dtype == np.float64 else t).cuda()
    return [None if n not in x else one(x[n]) for n in names]


def f64(t):
    return [None if a is None else a.cpu().to(torch.float64).numpy() if a.is_floating_point() else a.cpu().numpy()
            for a in t]


@pytest.mark.parametrize("ps", [1, 16, 64])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2), (16, 2)], ids=["gqa1", "gqa4", "gqa8"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "f16", "f32"])
def test_decode_attention(ps, heads, dtype):
    x = ref.random_decode(np.random.default_rng(ps), b=6, hq=heads[0], hkv=heads[1], d=128, ps=ps, context=700)
    t = on_gpu(x, DECODE, dtype)
    out, lse = decode_attention(*t, page_size=ps, logits_soft_cap=30.0)
    torch.cuda.synchronize()
    want_out, want_lse = ref.decode_attention(*f64(t), page_size=ps, logits_soft_cap=30.0)
    name = "float32" if dtype == torch.float32 else "bfloat16"
    assert_rel_l2(out.cpu(), want_out, name)
    assert_rel_l2(lse.cpu(), want_lse, name)


@pytest.mark.parametrize("bs", [1, 16, 64])
@pytest.mark.parametrize("opts", [dict(), dict(causal=False, sliding_window=20, logits_soft_cap=8.0)],
                         ids=["causal", "non_causal_window_cap"])
def test_chunked_prefill_paged_decode(bs, opts):
    x = ref.random_chunked(np.random.default_rng(bs), q_lens=(1, 40, 1, 17, 1, 1), hq=16, hkv=2, d=128, bs=bs,
                           max_blocks=max(2, 256 // bs), bias=True)
    t = on_gpu(x, CHUNKED, torch.bfloat16)
    want_out, want_kc, want_vc = ref.chunked_prefill_paged_decode(*f64(t), **opts)
    out, kc, vc = chunked_prefill_paged_decode(*t, **opts)
    torch.cuda.synchronize()
    assert kc is t[3] and vc is t[4]
    assert np.array_equal(kc.cpu().to(torch.float64).numpy(), want_kc)
    assert np.array_equal(vc.cpu().to(torch.float64).numpy(), want_vc)
    assert_rel_l2(out.cpu(), want_out, "bfloat16")
