"""ejk.torch.native_sparse_attention's gradients on CUDA tensors: the selection's backward runs
libejk's CUDA kernels (the op dispatches by the tensors' device), checked with the compression
branch and the seed's top-k, and with given block indices that repeat blocks, against torch's
float64 autograd of the dense masked definition (nsa_reference.py). The same checks run on CPU
tensors, so the test's own arithmetic is exercised where no GPU is; the CUDA cases skip, saying
why, where torch has no CUDA device."""
import numpy as np
import pytest

import nsa_reference as ref
from torch_support import assert_rel_l2, import_torch

torch = import_torch()
from ejk.torch import native_sparse_attention  # noqa: E402

NO_GPU = f"no CUDA device for torch (torch {torch.__version__}, CUDA {torch.version.cuda})"
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU))]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def operands(gen, device, dtype, b=1, t=200, hq=8, hkv=2, d=64):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype).requires_grad_()

    def gate():
        g = torch.rand(b, t, hq, generator=gen, dtype=torch.float64) * 0.8 + 0.2
        return g.to(device=device, dtype=dtype).requires_grad_()

    return [randn(b, t, hq, d), randn(b, t, hkv, d), randn(b, t, hkv, d), gate(), gate()]


def as64(xs):
    return [x.detach().cpu().double().requires_grad_() for x in xs]


def check_grads(out, want, x, x64, w, dtype_name):
    grads = torch.autograd.grad((out.double() * w.to(out.device)).sum(), x)
    want_grads = torch.autograd.grad((want * w).sum(), x64)
    assert_rel_l2(out.detach().cpu().double().numpy(), want.detach().numpy(), dtype_name)
    for g, e in zip(grads, want_grads):
        assert g.device == out.device
        assert_rel_l2(g.detach().cpu().double().numpy(), e.numpy(), dtype_name)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_gradients_with_the_seeds_selection(device, dtype_name):
    gen = torch.Generator().manual_seed(5)
    x = operands(gen, device, DTYPES[dtype_name])
    scale = 64 ** -0.5
    out = native_sparse_attention(*x, None, 3)
    x64 = as64(x)
    idx = ref.select(x64[0].detach().numpy(), x64[1].detach().numpy(), scale, 3)
    want = ref.nsa(torch, *x64, idx, None, scale)
    check_grads(out, want, x, x64, torch.randn(out.shape, generator=gen, dtype=torch.float64), dtype_name)


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_with_given_repeated_blocks(device):
    gen = torch.Generator().manual_seed(6)
    q, k, v, _, g_slc = operands(gen, device, torch.bfloat16, t=300, hq=20, hkv=1, d=128)
    r = np.random.default_rng(7)
    idx = r.integers(-1, 5, (1, 300, 1, 4)).astype(np.int32)
    idx[..., 0] = np.arange(300)[None, :, None] // ref.BLOCK  # the own block, listed twice
    idx[..., 2] = idx[..., 0]
    x = [q, k, v, g_slc]
    out = native_sparse_attention(q, k, v, None, g_slc, torch.from_numpy(idx).to(device), 4)
    x64 = as64(x)
    want = ref.nsa(torch, *x64[:3], None, x64[3], idx, None, 128 ** -0.5)
    check_grads(out, want, x, x64, torch.randn(out.shape, generator=gen, dtype=torch.float64), "bfloat16")


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_gradients(device):
    # Packed sequences (one selection call each) against each piece's float64 reference.
    gen = torch.Generator().manual_seed(8)
    x = operands(gen, device, torch.bfloat16, t=330, hq=4, hkv=1)
    cu = [0, 130, 130, 330]
    out = native_sparse_attention(*x, None, 2, torch.tensor(cu, dtype=torch.int32))
    x64 = as64(x)
    wants = []
    for lo, hi in zip(cu[:-1], cu[1:]):
        if hi == lo:
            continue
        piece = [a[:, lo:hi] for a in x64]
        idx = ref.select(piece[0].detach().numpy(), piece[1].detach().numpy(), 64 ** -0.5, 2)
        wants.append(ref.nsa(torch, *piece, idx, None, 64 ** -0.5))
    w = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    check_grads(out, torch.cat(wants, 1), x, x64, w, "bfloat16")
