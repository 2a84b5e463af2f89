"""ejk.torch.ragged_page_attention_v3 on CPU tensors: the cache is updated in place (the same
tensor comes back) and the output matches the float64 reference of the JAX test."""
import numpy as np
import pytest

from ragged_page_v3_reference import problem, reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit

torch = import_torch()
from ejk.torch import ragged_page_attention_v3  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def test_updates_the_cache_in_place_and_matches_the_reference():
    p = problem(np.random.default_rng(0))
    sinks = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    t = {n: torch.from_numpy(np.ascontiguousarray(p[n])) for n in ("q", "k", "v", "cache", "kv_lens", "tables", "qsl",
                                                                     "dist")}
    out, cache = ragged_page_attention_v3(t["q"], t["k"], t["v"], t["cache"], t["kv_lens"], t["tables"], t["qsl"],
                                          t["dist"], torch.from_numpy(sinks), softmax_scale=0.125, sliding_window=9)
    assert cache is t["cache"]
    want_out, want_cache = reference(p, sinks, scale=0.125, window=9)
    assert_rel_l2(cache.numpy().astype(np.float64), want_cache)
    assert_rel_l2(out.numpy().astype(np.float64), want_out)
