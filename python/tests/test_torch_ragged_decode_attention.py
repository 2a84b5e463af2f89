"""ejk.torch.ragged_decode_attention on CPU tensors against the float64 reference of the JAX
test (the seed's definition): GQA with per-kv-head and per-query-head sinks, a window and a
soft cap, the [B, 1, Hq, D] query form."""
import numpy as np
import pytest

from torch_support import assert_rel_l2, import_torch, no_cpu_jit
from ragged_decode_reference import reference

torch = import_torch()
from ejk.torch import ragged_decode_attention  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


@pytest.mark.parametrize("sinks", [(2, 3), (8, 2)])
def test_matches_the_reference(sinks):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*s, generator=gen) for s in ((3, 8, 64), (3, 40, 2, 64), (3, 40, 2, 64)))
    aux = torch.randn(*sinks, generator=gen)
    start, end = torch.tensor([0, 3, 20], dtype=torch.int32), torch.tensor([40, 18, 21], dtype=torch.int32)
    got = ragged_decode_attention(q[:, None], k, v, start, end, aux, sliding_window=(6, 1), logits_soft_cap=5.0)
    assert got.shape == (3, 1, 8, 64)
    want = reference(q.numpy(), k.numpy(), v.numpy(), start.numpy(), end.numpy(), aux.numpy(), window=(6, 1), cap=5.0)
    assert_rel_l2(got[:, 0].numpy().astype(np.float64), want)
