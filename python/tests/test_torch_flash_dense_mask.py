"""torch.ops.ejk.flash_attention with attention_mask (uint8 [B, Hq|1, Sq, Sk], the `.dmask`
variants; what ejk.torch.flash_attention passes for a MaskInfo's dense term) against the float64
dense-masked softmax and its autograd: q, k, v, bias and sinks, causal, densities 0, 0.3 and 1, a
fully hidden row, per-head and broadcast masks. (The MaskInfo side is JAX's; test_flash_dense_mask.py.)"""
import numpy as np
import pytest

import flash_grad_reference as ref
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
import ejk.torch  # noqa: E402,F401  (registers torch.ops.ejk)

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

MASKS = [dict(density=0.3), dict(density=1.0), dict(density=0.0), dict(density=0.6, hidden_row=True)]


@pytest.mark.parametrize("opts", MASKS, ids=lambda o: f"d{o['density']}" + ("-row" if o.get("hidden_row") else ""))
@pytest.mark.parametrize("heads", [4, 1], ids=["per-head", "broadcast-heads"])
def test_forward_and_gradients(rng, opts, heads):
    b, sq, sk, hq, hkv, d = 2, 17, 21, 4, 2, 32
    mask = rng.random((b, heads, sq, sk)) < opts["density"]
    if opts.get("hidden_row"):
        mask[:, :, 1] = False
    x = dict(q=rng.standard_normal((b, sq, hq, d)), k=rng.standard_normal((b, sk, hkv, d)),
             v=rng.standard_normal((b, sk, hkv, d)), bias=rng.standard_normal((b, 1, sq, sk)),
             softmax_aux=rng.standard_normal((hq, 2)))
    leaves = {n: torch.from_numpy(a).float().requires_grad_() for n, a in x.items()}
    w = torch.from_numpy(rng.standard_normal((b, sq, hq, d))).float()
    # The spec's order: q, k, v, bias, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k,
    # softmax_aux, attention_mask.
    res = torch.ops.ejk.flash_attention(leaves["q"], leaves["k"], leaves["v"], leaves["bias"], None, None, None,
                                        None, leaves["softmax_aux"], torch.from_numpy(mask.astype(np.uint8)),
                                        causal=True)
    out = res[0]
    (out * w).sum().backward()

    x64 = {n: torch.from_numpy(a).requires_grad_() for n, a in x.items()}
    visible = torch.from_numpy(mask) & ref.visible_mask(torch, sq, sk, True)[:, None]
    want, _ = ref.attention(torch, x64["q"], x64["k"], x64["v"], visible, x64["bias"], x64["softmax_aux"])
    (want * w.double()).sum().backward()
    assert_rel_l2(numpy64(out), numpy64(want))
    for n in x:
        assert leaves[n].grad is not None, n
        assert np.all(np.isfinite(numpy64(leaves[n].grad))), n
        assert_rel_l2(numpy64(leaves[n].grad), numpy64(x64[n].grad))
