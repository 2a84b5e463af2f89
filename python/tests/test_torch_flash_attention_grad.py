"""ejk.torch.flash_attention's autograd (flash_attention_backward from the saved out and lse)
against torch's float64 autograd of flash_grad_reference.attention on the CPU (dsoftmax_aux within
the tolerance of the sum of its terms' magnitudes, which may cancel): q, k, v, bias
(broadcast dims summed) and sinks, causal, window, soft cap, GQA, bfloat16, a loss through lse;
torch.compile of forward and backward; opcheck of both ops; and gradcheck of the float64 reference itself, so the
yardstick is not trusted blindly."""
import numpy as np
import pytest

import flash_grad_reference as ref
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
from ejk.torch import flash_attention, flash_attention_with_lse  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

NAMES = ("q", "k", "v", "bias", "softmax_aux")


def operands(rng, b=2, sq=17, sk=21, hq=4, hkv=2, d=32, bias=None, sinks=None, dtype=torch.float32):
    def randn(*shape, dt=dtype):
        return torch.from_numpy(rng.standard_normal(shape)).to(dt)
    x = dict(q=randn(b, sq, hq, d), k=randn(b, sk, hkv, d), v=randn(b, sk, hkv, d))
    if bias is not None:
        x["bias"] = randn(*bias)
    if sinks is not None:
        x["softmax_aux"] = randn(*sinks, dt=torch.float32)
    return x


def reference_grads(x, w, w_lse, causal, window, softmax_scale=None, logits_soft_cap=None):
    x64 = {n: torch.from_numpy(numpy64(a)).requires_grad_() for n, a in x.items()}
    b, sq, hq = x["q"].shape[:3]
    vis = ref.visible_mask(torch, sq, x["k"].shape[1], causal, window)
    out, lse = ref.attention(torch, x64["q"], x64["k"], x64["v"], vis, x64.get("bias"), x64.get("softmax_aux"),
                             softmax_scale, logits_soft_cap)
    loss = (out * w.double()).sum()
    if w_lse is not None:
        loss = loss + (lse * w_lse.double()).sum()
    loss.backward()
    grads = {n: a.grad for n, a in x64.items()}
    if "softmax_aux" in x:
        # The sum of |each row's term| of dsoftmax_aux, -exp(sink - lse_i) (d_out_i . out_i - dlse_i):
        # terms of both signs may cancel to far less, and f32 inputs (lse, out) err relative to them.
        with torch.no_grad():
            sinks = x64["softmax_aux"]
            sinks_h = sinks if sinks.ndim == 2 else sinks[None].expand(hq, -1)
            delta = (w.double() * out).sum(-1).transpose(1, 2) - (0 if w_lse is None else w_lse.double())
            terms = (torch.exp(sinks_h[None, :, None, :] - lse[..., None]) * delta[..., None]).abs()
            grads["softmax_aux_terms"] = terms.sum((0, 2)) if sinks.ndim == 2 else terms.sum((0, 1, 2))
    return grads


def check(rng, x, causal=False, sliding_window=None, with_lse=False, compile=False, dtype_name="float32", **opts):
    b, sq, hq, d = x["q"].shape
    w = torch.from_numpy(rng.standard_normal((b, sq, hq, d))).float()
    w_lse = torch.from_numpy(rng.standard_normal((b, hq, sq))).float() if with_lse else None
    leaves = {n: a.clone().requires_grad_() for n, a in x.items()}

    def loss_of(q, k, v, bias, sinks):
        res = flash_attention_with_lse(q, k, v, bias, None, None, sinks, causal=causal,
                                       sliding_window=sliding_window, **opts)
        if with_lse:
            return (res[0].float() * w).sum() + (res[1] * w_lse).sum()
        return (res[0].float() * w).sum()

    fn = torch.compile(loss_of, fullgraph=True) if compile else loss_of
    fn(leaves["q"], leaves["k"], leaves["v"], leaves.get("bias"), leaves.get("softmax_aux")).backward()
    window = (sliding_window, sliding_window) if isinstance(sliding_window, int) else sliding_window
    want = reference_grads(x, w, w_lse, causal, window, **opts)
    for n in x:
        assert leaves[n].grad is not None, n
        assert leaves[n].grad.shape == x[n].shape, n
        if n == "softmax_aux":
            err = (leaves[n].grad.double() - want[n]).abs()
            bound = {"float32": 1e-5, "bfloat16": 2e-2}[dtype_name] * want["softmax_aux_terms"]
            assert bool((err <= bound).all()), f"dsoftmax_aux error {err.tolist()} > {bound.tolist()}"
        else:
            assert_rel_l2(leaves[n].grad, want[n].numpy(), dtype_name=dtype_name)


def test_plain_gqa(rng):
    check(rng, operands(rng))


def test_causal_sinks_softcap_bias_broadcast(rng):
    check(rng, operands(rng, bias=(1, 4, 17, 21), sinks=(4, 2)), causal=True, logits_soft_cap=2.5)


def test_window_shared_sinks_bias_over_heads_and_lse(rng):
    check(rng, operands(rng, bias=(2, 1, 17, 21), sinks=(2,)), sliding_window=(4, 3), with_lse=True,
          softmax_scale=0.5)


def test_bfloat16(rng):
    check(rng, operands(rng, d=64, dtype=torch.bfloat16), causal=True, dtype_name="bfloat16")


def test_torch_compile_forward_and_backward(rng):
    check(rng, operands(rng, sinks=(4, 1)), causal=True, compile=True)


def test_reference_gradcheck(rng):
    """The float64 reference's autograd against finite differences (torch.autograd.gradcheck)."""
    x = {n: torch.from_numpy(numpy64(a)).requires_grad_() for n, a in
         operands(rng, b=1, sq=4, sk=5, hq=2, hkv=1, d=4, bias=(1, 2, 4, 5), sinks=(2, 1)).items()}
    vis = ref.visible_mask(torch, 4, 5, causal=True, window=(2, 1))

    def f(q, k, v, bias, sinks):
        out, lse = ref.attention(torch, q, k, v, vis, bias, sinks, 0.7, 2.0)
        return out, torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    assert torch.autograd.gradcheck(f, tuple(x[n] for n in NAMES))


def test_opcheck_forward_with_gradients_and_backward(rng):
    """opcheck of flash_attention with inputs that require grad (its autograd registration and
    saved outputs), and of flash_attention_backward itself (no second derivative)."""
    ops = torch.ops.ejk
    x = {n: a.requires_grad_() for n, a in operands(rng, bias=(1, 4, 17, 21), sinks=(4, 2)).items()}
    # Spec order: q, k, v, bias, q/kv segment ids, cum_seqlens q/k, softmax_aux, attention_mask,
    # then the scalars softmax_scale, causal, sliding_window, logits_soft_cap, normalize_output,
    # max_seqlen_q/k.
    tensors = (x["q"], x["k"], x["v"], x["bias"], None, None, None, None, x["softmax_aux"], None)
    scalars = (0.3, True, None, 5.0, None, None, None)
    torch.library.opcheck(ops.flash_attention.default, tensors + scalars)
    out, lse = ops.flash_attention(*tensors, *scalars)
    d_out = torch.from_numpy(rng.standard_normal(tuple(out.shape))).float()
    d_lse = torch.from_numpy(rng.standard_normal(tuple(lse.shape))).float()
    detached = tuple(a.detach() if a is not None else None for a in tensors)
    torch.library.opcheck(ops.flash_attention_backward.default,
                          detached + (out.detach(), lse.detach(), d_out, d_lse) + scalars)
