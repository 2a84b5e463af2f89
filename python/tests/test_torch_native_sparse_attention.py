"""ejk.torch.native_sparse_attention on CPU tensors: output and the gradients of query, key,
value and both gates against torch's float64 autograd of the dense masked definition
(nsa_reference.py), with the seed's top-k selection; given block indices with repeats
attended once; varlen equal to a loop over the sequences."""
import numpy as np
import pytest

import nsa_reference as ref
from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import native_sparse_attention  # noqa: E402


def operands(gen, b=1, t=200, hq=4, hkv=2, d=32, dtype=torch.float32):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()

    def gate():
        return (torch.rand(b, t, hq, generator=gen, dtype=torch.float64) * 0.8 + 0.2).to(dtype).requires_grad_()

    return [randn(b, t, hq, d), randn(b, t, hkv, d), randn(b, t, hkv, d), gate(), gate()]


def as64(xs):
    return [x.detach().double().requires_grad_() for x in xs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_and_gradients(dtype):
    gen = torch.Generator().manual_seed(0)
    x = operands(gen, dtype=dtype)
    scale = 32 ** -0.5
    out = native_sparse_attention(*x, None, 3)
    w = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    grads = torch.autograd.grad((out.double() * w).sum(), x)
    x64 = as64(x)
    idx = ref.select(x64[0].detach().numpy(), x64[1].detach().numpy(), scale, 3)
    want = ref.nsa(torch, *x64, idx, None, scale)
    want_grads = torch.autograd.grad((want * w).sum(), x64)
    name = "float32" if dtype == torch.float32 else "bfloat16"
    assert_rel_l2(out.detach().double().numpy(), want.detach().numpy(), name)
    for g, e in zip(grads, want_grads):
        assert_rel_l2(g.double().numpy(), e.numpy(), name)


def test_given_indices_with_repeats_count_once():
    gen = torch.Generator().manual_seed(1)
    q, k, v, _, g_slc = operands(gen, t=150)
    r = np.random.default_rng(2)
    idx = r.integers(-1, 3, (1, 150, 2, 4)).astype(np.int32)
    idx[..., 1] = idx[..., 0]  # every first block listed twice
    out = native_sparse_attention(q, k, v, None, g_slc, torch.from_numpy(idx), 4)
    want = ref.nsa(torch, *as64([q, k, v]), None, as64([g_slc])[0], idx, None, 32 ** -0.5)
    assert_rel_l2(out.detach().double().numpy(), want.detach().numpy())


def test_varlen_is_a_loop_over_the_sequences():
    gen = torch.Generator().manual_seed(3)
    x = operands(gen, t=260)
    cu = torch.tensor([0, 70, 70, 260], dtype=torch.int32)
    out = native_sparse_attention(*x, None, 2, cu)
    pieces = [native_sparse_attention(*[a[:, lo:hi] for a in x], None, 2) for lo, hi in ((0, 70), (70, 260))]
    torch.testing.assert_close(out, torch.cat(pieces, 1), rtol=0, atol=0)
    (gk,) = torch.autograd.grad(out.sum(), [x[1]])
    assert torch.isfinite(gk).all()
