"""ejk.torch.multi_latent_ragged_page_attention and _v2 on CPU tensors: the cache is updated in
place (the same tensor comes back) and the output matches the float64 reference of the JAX test,
float32 and bfloat16, with a window, a soft cap and the scales."""
import numpy as np
import pytest

from mla_page_reference import problem, reference
from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import multi_latent_ragged_page_attention, multi_latent_ragged_page_attention_v2  # noqa: E402

NAMES = ("qn", "qp", "kv", "kp", "cache", "kv_lens", "tables", "qsl", "dist")


@pytest.mark.parametrize("fn", [multi_latent_ragged_page_attention, multi_latent_ragged_page_attention_v2])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_updates_the_cache_in_place_and_matches_the_reference(fn, dtype):
    p = problem(np.random.default_rng(0), hq=20, pack=1 if dtype == "float32" else 2)
    t = {n: torch.from_numpy(np.ascontiguousarray(p[n])) for n in NAMES}
    for n in NAMES[:5]:
        t[n] = t[n].to(getattr(torch, dtype))
        p[n] = t[n].float().numpy()  # the reference sees the rounded inputs
    opts = dict(sliding_window=9, logits_soft_cap=6.0, q_scale=0.8, k_scale=0.9, v_scale=1.1)
    out, cache = fn(*(t[n] for n in NAMES), **opts)
    assert cache is t["cache"] and out.dtype == t["qn"].dtype
    want_out, want_cache = reference(p, window=9, cap=6.0, q_scale=0.8, k_scale=0.9, v_scale=1.1)
    assert_rel_l2(cache.float().numpy().astype(np.float64), want_cache, dtype_name=dtype)
    assert_rel_l2(out.float().numpy().astype(np.float64), want_out, dtype_name=dtype)
