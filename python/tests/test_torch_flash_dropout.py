"""Dropout in ejk.torch.flash_attention (CPU): out and the autograd gradients (the backward gets the
forward's seed) against torch's float64 autograd of the reference with the numpy Philox mask
(philox_reference.py), causal with sinks and GQA, a window with a broadcast bias, bfloat16; the
mask is the one ejk.jax draws (the same numpy yardstick); a bad dropout_prob named."""
import numpy as np
import pytest

import flash_grad_reference as ref
import philox_reference as philox
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
from ejk.torch import flash_attention  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def check(rng, p, seed, b=2, sq=17, sk=21, hq=4, hkv=2, d=32, bias=None, sinks=None, causal=False,
          sliding_window=None, dtype=torch.float32, dtype_name="float32"):
    def randn(*shape, dt=dtype):
        return torch.from_numpy(rng.standard_normal(shape)).to(dt)
    x = dict(q=randn(b, sq, hq, d), k=randn(b, sk, hkv, d), v=randn(b, sk, hkv, d))
    if bias is not None:
        x["bias"] = randn(*bias)
    if sinks is not None:
        x["softmax_aux"] = randn(*sinks, dt=torch.float32)
    w = torch.from_numpy(rng.standard_normal((b, sq, hq, d))).float()
    leaves = {n: a.clone().requires_grad_() for n, a in x.items()}
    out = flash_attention(leaves["q"], leaves["k"], leaves["v"], leaves.get("bias"), None, None,
                          leaves.get("softmax_aux"), causal=causal, sliding_window=sliding_window, dropout_prob=p,
                          dropout_seed=seed)
    (out.float() * w).sum().backward()

    x64 = {n: torch.from_numpy(numpy64(a)).requires_grad_() for n, a in x.items()}
    vis = ref.visible_mask(torch, sq, sk, causal, sliding_window)
    drop = torch.from_numpy(philox.drop_factors(seed, p, b, hq, sq, sk))
    want, _ = ref.attention(torch, x64["q"], x64["k"], x64["v"], vis, x64.get("bias"), x64.get("softmax_aux"),
                            drop=drop)
    (want * w.double()).sum().backward()
    assert_rel_l2(out.detach(), want.detach().numpy(), dtype_name=dtype_name)
    for n in ("q", "k", "v", "bias"):
        if n in x:
            assert_rel_l2(leaves[n].grad, x64[n].grad.numpy(), dtype_name=dtype_name)
    if sinks is not None:  # its terms cancel: an absolute bound at the size of the other gradients
        err = (leaves["softmax_aux"].grad.double() - x64["softmax_aux"].grad).abs().max().item()
        assert err <= 1e-4, err


def test_causal_sinks_gqa(rng):
    check(rng, 0.3, 11, causal=True, sinks=(4, 2))


def test_window_bias_broadcast(rng):
    check(rng, 0.5, -(2 ** 62), bias=(1, 4, 17, 21), sliding_window=(4, 3))


def test_bfloat16(rng):
    check(rng, 0.2, 5, d=64, causal=True, dtype=torch.bfloat16, dtype_name="bfloat16")


@pytest.mark.parametrize("p", [-0.5, 1.0, float("nan")])
def test_bad_dropout_prob_named(rng, p):
    q = torch.from_numpy(rng.standard_normal((1, 8, 2, 32))).float()
    with pytest.raises(ValueError, match="dropout_prob"):
        flash_attention(q, q, q, dropout_prob=p)
