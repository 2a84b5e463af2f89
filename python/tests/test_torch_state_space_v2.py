"""ejk.torch.state_space_v2 on CPU tensors against the float64 recurrence (ssm2_reference.py):
forward with groups, gate and the gated RMSNorm; autograd through state_space_v2_backward
against torch's float64 autograd of the reference; opcheck of both ops."""
import numpy as np
import pytest

import ssm2_reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
from ejk.torch import state_space_v2  # noqa: E402

ops = torch.ops.ejk
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

ARGS = ("x", "A", "B", "C", "D", "dt")


def inputs(rng, b=2, s=11, h=4, p=6, g=2, n=8):
    def randn(*shape):
        return torch.from_numpy(rng.standard_normal(shape)).float()
    return dict(x=randn(b, s, h, p), A=torch.from_numpy(-rng.uniform(0.5, 2.0, h)).float(), B=randn(b, s, g, n),
                C=randn(b, s, g, n), D=randn(h), dt=torch.from_numpy(np.log1p(np.exp(rng.normal(-1.0, 0.5, (b, s, h))))).float(),
                gate=randn(b, s, h * p), initial_state=randn(b, h, p, n))


@pytest.mark.parametrize("norm", [False, True])
def test_forward_and_gradients(rng, norm):
    x = inputs(rng)
    given = {name: a.clone().requires_grad_() for name, a in x.items()}
    y, h, _ = state_space_v2(*(given[n] for n in ARGS), gate=given["gate"], initial_state=given["initial_state"],
                             n_groups=2, use_gated_rmsnorm=norm)
    ref = {name: a.detach().double().requires_grad_() for name, a in x.items()}
    ry, rh = ssm2_reference.state_space_v2(torch, **ref, use_gated_rmsnorm=norm)
    assert_rel_l2(y, numpy64(ry))
    assert_rel_l2(h, numpy64(rh))
    w_y, w_h = torch.randn_like(ry), torch.randn_like(rh)
    got = torch.autograd.grad((y.double() * w_y).sum() + (h.double() * w_h).sum(), list(given.values()))
    want = torch.autograd.grad((ry * w_y).sum() + (rh * w_h).sum(), list(ref.values()))
    for name, gr, wr in zip(given, got, want):
        assert gr.dtype == x[name].dtype, name
        assert_rel_l2(gr, numpy64(wr))


def test_opcheck(rng):
    x = {name: a.requires_grad_() for name, a in inputs(rng, s=7).items() if name != "gate"}
    args = tuple(x[n] for n in ARGS) + (x["initial_state"],)
    torch.library.opcheck(ops.state_space_v2.default, args + (None,))  # dense: no cu_seqlens
    d_y = torch.randn(tuple(x["x"].shape))
    d_h = torch.randn(tuple(x["initial_state"].shape))
    torch.library.opcheck(ops.state_space_v2_backward.default, tuple(a.detach() for a in args) + (d_y, d_h, None))
