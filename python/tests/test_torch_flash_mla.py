"""ejk.torch.flash_mla on CPU tensors: output and every input's gradient against torch's float64
autograd of the definition (the seed's logit modes, written here with torch ops), and the
refusals named."""
import pytest

from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import flash_mla  # noqa: E402


def reference(q, kv, w_kc, w_vc, b_q, b_k, aux, causal, scale):
    """float64 MLA: b_k given, b_q optional (the modes with rope parts); aux [Hq, S] sinks."""
    hq, hkv, d_nope = q.shape[2], w_kc.shape[1], w_kc.shape[2]
    k = torch.einsum("btr,rhd->bthd", kv, w_kc).repeat_interleave(hq // hkv, 2)
    v = torch.einsum("btr,rhd->bthd", kv, w_vc).repeat_interleave(hq // hkv, 2)
    rope_q = q[..., d_nope:] if b_q is None else b_q[:, :, None].expand(*q.shape[:3], b_q.shape[2])
    s = torch.einsum("bqhd,bkhd->bhqk", q[..., :d_nope], k) + torch.einsum("bqhd,bkd->bhqk", rope_q, b_k)
    s = s * scale
    t = q.shape[1]
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min)
    full = torch.cat([s, aux[None, :, None].expand(*s.shape[:3], aux.shape[1])], -1)
    return torch.einsum("bhqk,bkhd->bqhd", full.softmax(-1)[..., :t], v)


@pytest.mark.parametrize("mode", ["rope_in_q", "both"])
def test_forward_and_gradients(mode):
    gen = torch.Generator().manual_seed(0)
    b, t, hq, hkv, r, d_nope, d_rope, d_v = 2, 9, 4, 2, 20, 16, 8, 28

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).requires_grad_()
    dq = d_nope + d_rope if mode == "rope_in_q" else d_nope
    x = [randn(b, t, hq, dq), randn(b, t, r), randn(r, hkv, d_nope, scale=0.3), randn(r, hkv, d_v, scale=0.3),
         randn(b, t, d_rope) if mode == "both" else None, randn(b, t, d_rope), randn(hq, 2)]
    given = [a for a in x if a is not None]
    w = torch.randn(b, t, hq, d_v, generator=gen, dtype=torch.float64)
    want = reference(*x, causal=True, scale=(d_nope + d_rope) ** -0.5)
    want_grads = torch.autograd.grad((want * w).sum(), given)
    x32 = [None if a is None else a.detach().float().requires_grad_() for a in x]
    got = flash_mla(*x32[:6], causal=True, softmax_aux=x32[6])
    assert got.shape == (b, t, hq, d_v) and got.dtype == torch.float32
    assert_rel_l2(got.detach(), want.detach().numpy())
    grads = torch.autograd.grad((got * w.float()).sum(), [a for a in x32 if a is not None])
    for g, e in zip(grads, want_grads):
        assert_rel_l2(g, e.numpy())


def test_refusals():
    q, kv, w = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 8), torch.randn(8, 1, 8)
    with pytest.raises(NotImplementedError, match="dropout_prob"):
        flash_mla(q, kv, w, w, dropout_prob=0.5, deterministic=False)
    with pytest.raises(ValueError, match="key_value"):
        flash_mla(q, kv[:, :3], w, w)
