"""ejk.torch.blocksparse_attention on CPU tensors: forward and autograd (through
blocksparse_attention_backward) against torch's float64 autograd of blocksparse_reference.attention
on random block layouts (shared and per head), causal + window, GQA, sinks, soft cap, float32 and
bfloat16; refused arguments named."""
import numpy as np
import pytest

import blocksparse_reference as ref
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
from ejk.torch import blocksparse_attention  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def layout(rng, heads, nq, nk, density):
    lay = rng.random((1, heads, nq, nk)) < density
    lay[0, 0, -1] = False  # a fully masked query block
    return lay


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("per_head", [False, True])
def test_forward_and_autograd(dtype, per_head):
    rng = np.random.default_rng(1)
    b, hq, hkv, sq, sk, d, bq, bk = 1, 6, 2, 80, 96, 32, 16, 32
    x = {n: torch.from_numpy(rng.standard_normal(s)).to(dtype).requires_grad_()
         for n, s in (("q", (b, hq, sq, d)), ("k", (b, hkv, sk, d)), ("v", (b, hkv, sk, d)))}
    sinks = torch.from_numpy(rng.standard_normal((hq, 2))).float().requires_grad_()
    lay = layout(rng, hq if per_head else 1, -(-sq // bq), -(-sk // bk), 0.4)
    opts = dict(causal=True, sliding_window=(30, 5), logits_soft_cap=20.0)
    out = blocksparse_attention(x["q"], x["k"], x["v"], sinks, qkv_layouts=torch.from_numpy(lay),
                                chunk_size=(bq, bk), **opts)
    w = torch.from_numpy(rng.standard_normal(out.shape)).float()
    (out.float() * w).sum().backward()

    x64 = {n: t.detach().double().requires_grad_() for n, t in x.items()}
    s64 = sinks.detach().double().requires_grad_()
    vis = ref.token_mask(lay, sq, sk, bq, bk, True, (30, 5))
    want, _ = ref.attention(torch, x64["q"], x64["k"], x64["v"], vis, s64, softcap=20.0)
    (want * w.double()).sum().backward()
    name = "float32" if dtype == torch.float32 else "bfloat16"
    assert_rel_l2(out.detach(), want.detach().numpy(), name)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for n, g, gw in [*((n, x[n].grad, x64[n].grad) for n in x), ("softmax_aux", sinks.grad, s64.grad)]:
        got, exp = numpy64(g), gw.numpy()
        err = np.linalg.norm(got - exp) / max(np.linalg.norm(exp), 1e-30)
        assert not np.isnan(got).any() and err <= tol, f"{n}: relative L2 error {err:.3g} > {tol}"


def test_refused_arguments():
    q = torch.zeros(1, 2, 32, 16)
    with pytest.raises(NotImplementedError, match="bias"):
        blocksparse_attention(q, q, q, bias=torch.zeros(1, 2, 32, 32))
    with pytest.raises(NotImplementedError, match="mesh"):
        blocksparse_attention(q, q, q, mesh=object())
