"""ejk.torch.decode_attention and ejk.torch.chunked_prefill_paged_decode on CPU tensors against
the float64 references of the JAX tests (decode_reference.py): out and lse; the caches updated
in place (the same tensors come back) with exactly the new rows; torch.compile."""
import numpy as np
import pytest

import decode_reference as ref
from torch_support import assert_rel_l2, import_torch, no_cpu_jit

torch = import_torch()
from ejk.torch import chunked_prefill_paged_decode, decode_attention  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

DECODE = ("query", "key_buffer", "value_buffer", "req_to_tokens", "seq_lens")
CHUNKED = ("queries", "keys", "values", "key_cache", "value_cache", "kv_lens", "block_tables", "query_start_loc",
           "alibi_slopes", "softmax_aux")


def tensors(x, names, dtype):
    return [None if n not in x else torch.from_numpy(np.ascontiguousarray(x[n])).to(dtype)
            if x[n].dtype == np.float64 else torch.from_numpy(np.ascontiguousarray(x[n])) for n in names]


def f64(t):
    return [None if a is None else a.to(torch.float64).numpy() if a.is_floating_point() else a.numpy() for a in t]


@pytest.mark.parametrize("ps", [1, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_decode_attention(ps, dtype):
    t = tensors(ref.random_decode(np.random.default_rng(3), b=4, hq=8, hkv=2, d=64, ps=ps, context=50), DECODE, dtype)
    out, lse = decode_attention(*t, page_size=ps, logits_soft_cap=7.0)
    assert out.dtype == dtype and lse.dtype == torch.float32
    want_out, want_lse = ref.decode_attention(*f64(t), page_size=ps, logits_soft_cap=7.0)
    name = "float32" if dtype == torch.float32 else "bfloat16"
    assert_rel_l2(out, want_out, name)
    assert_rel_l2(lse, want_lse, name)


def test_decode_attention_compiles():
    t = tensors(ref.random_decode(np.random.default_rng(4), ps=16, context=40), DECODE, torch.float32)
    fn = torch.compile(lambda *a: decode_attention(*a, page_size=16), fullgraph=True)
    out, lse = fn(*t)
    want_out, want_lse = ref.decode_attention(*f64(t), page_size=16)
    assert_rel_l2(out, want_out)
    assert_rel_l2(lse, want_lse)


@pytest.mark.parametrize("opts", [dict(), dict(causal=False, sliding_window=10, logits_soft_cap=5.0)],
                         ids=["causal", "non_causal_window_cap"])
def test_chunked_updates_the_caches_in_place(opts):
    t = tensors(ref.random_chunked(np.random.default_rng(5), bias=True), CHUNKED, torch.float32)
    want_out, want_kc, want_vc = ref.chunked_prefill_paged_decode(*f64(t), **opts)
    out, kc, vc = chunked_prefill_paged_decode(*t, **opts)
    assert kc is t[3] and vc is t[4]
    assert np.array_equal(kc.numpy().astype(np.float64), want_kc)
    assert np.array_equal(vc.numpy().astype(np.float64), want_vc)
    assert_rel_l2(out, want_out)
