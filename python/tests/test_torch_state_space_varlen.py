"""ejk.torch.state_space_v1/v2 with cu_seqlens (packed sequences, an extension of the seed's
signature) on CPU tensors: outputs, final states and autograd of every input against torch's
float64 autograd of the recurrence run on each sequence alone (ssm1/ssm2_reference.py), with an
empty sequence; bad cu_seqlens named."""
import numpy as np
import pytest

import ssm1_reference
import ssm2_reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
from ejk.torch import state_space_v1, state_space_v2  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

NAMES = ("x", "A", "B", "C", "D", "dt", "gate", "initial_state")
TOKENS = ("x", "B", "C", "dt", "gate")


def inputs(rng, version, cu, dtype=torch.float32):
    """Packed operands [1, T, ...] as Mamba's projections give them; one state per sequence."""
    T, seqs = cu[-1], len(cu) - 1

    def randn(*shape, dt=dtype):
        return torch.from_numpy(rng.standard_normal(shape)).to(dt)
    if version == 1:
        d, n = 12, 16
        tok, group, state, width = (1, T, d), (1, T, n), (seqs, d, n), d
        a = torch.from_numpy(-rng.uniform(0.5, 2.0, (d, n))).float()
        d_param, dt_shape = randn(d, dt=torch.float32), (1, T, d)
    else:
        h, p, g, n = 4, 8, 2, 16
        tok, group, state, width = (1, T, h, p), (1, T, g, n), (seqs, h, p, n), h * p
        a = torch.from_numpy(-rng.uniform(0.5, 2.0, h)).float()
        d_param, dt_shape = randn(h, dt=torch.float32), (1, T, h)
    return dict(x=randn(*tok), A=a, B=randn(*group), C=randn(*group), D=d_param,
                dt=torch.from_numpy(np.log1p(np.exp(rng.normal(-1.0, 0.5, dt_shape)))).to(dtype),
                gate=randn(1, T, width), initial_state=randn(*state, dt=torch.float32))


def call(version, x, cu):
    args = [x.get(n) for n in NAMES]
    if version == 1:
        return state_space_v1(*args, cu_seqlens=cu)
    return state_space_v2(*args, n_groups=x["B"].shape[2], cu_seqlens=cu)


def packed_reference(version, x, cu):
    """The dense float64 reference on each sequence alone, outputs concatenated, states stacked."""
    ref = ssm1_reference.state_space_v1 if version == 1 else ssm2_reference.state_space_v2
    ys, hs = [], []
    for s in range(len(cu) - 1):
        part = {n: v[:, cu[s]:cu[s + 1]] if n in TOKENS else v[s:s + 1] if n == "initial_state" else v
                for n, v in x.items()}
        y, h = ref(torch, **part)
        ys.append(y), hs.append(h)
    return torch.cat(ys, 1), torch.cat(hs, 0)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("cu,dtype", [([0, 6, 6, 21, 30], torch.float32), ([0, 17], torch.float32),
                                      ([0, 6, 6, 21, 30], torch.bfloat16)])
def test_forward_and_gradients_of_every_input(rng, version, cu, dtype):
    x = inputs(rng, version, cu, dtype)
    cu_t = torch.tensor(cu, dtype=torch.int32)
    given = {n: a.clone().requires_grad_() for n, a in x.items()}
    y, h, _ = call(version, given, cu_t)
    w_y = torch.from_numpy(rng.standard_normal(tuple(y.shape)))
    w_h = torch.from_numpy(rng.standard_normal(tuple(h.shape)))

    def loss(y, h):
        return (y.double() * w_y).sum() + (h.double() * w_h).sum()
    got = torch.autograd.grad(loss(y, h), [given[n] for n in NAMES])
    ref = {n: a.detach().double().requires_grad_() for n, a in x.items()}
    ry, rh = packed_reference(version, ref, cu)
    want = torch.autograd.grad(loss(ry, rh), [ref[n] for n in NAMES])
    name = "float32" if dtype == torch.float32 else "bfloat16"
    assert y.dtype == dtype and h.shape == rh.shape
    assert_rel_l2(y, numpy64(ry), name)
    assert_rel_l2(h, numpy64(rh), name)
    for n, gr, wr in zip(NAMES, got, want):
        assert gr.dtype == x[n].dtype, n
        assert_rel_l2(gr, numpy64(wr), name)


@pytest.mark.parametrize("version", [1, 2])
def test_bad_cu_seqlens_is_named(rng, version):
    x = inputs(rng, version, [0, 6, 6, 21, 30])
    for bad, match in (([1, 6, 6, 21, 30], "cu_seqlens: must start at 0"),
                       ([0, 6, 5, 21, 30], "cu_seqlens: must be non-decreasing"),
                       ([0, 6, 6, 21, 29], "cu_seqlens: last entry must equal the packed length 30")):
        with pytest.raises(ValueError, match=match):
            call(version, x, torch.tensor(bad, dtype=torch.int32))


@pytest.mark.parametrize("version", [1, 2])
def test_opcheck_packed(rng, version):
    cu = [0, 4, 4, 11]
    x = {n: a.requires_grad_() for n, a in inputs(rng, version, cu).items() if version == 1 or n != "gate"}
    cu_t = torch.tensor(cu, dtype=torch.int32)
    names = [n for n in NAMES if n in x]
    args = tuple(x[n] for n in names) + (cu_t,)
    op = torch.ops.ejk.state_space_v1 if version == 1 else torch.ops.ejk.state_space_v2
    torch.library.opcheck(op.default, args)
    y, h = op.default(*(a.detach() if a is not cu_t else a for a in args))
    bwd = torch.ops.ejk.state_space_v1_backward if version == 1 else torch.ops.ejk.state_space_v2_backward
    dense = tuple(x[n].detach() for n in names)
    torch.library.opcheck(bwd.default, dense + (torch.randn(tuple(y.shape)), torch.randn(tuple(h.shape)), cu_t))
