"""ejk.torch.state_space_v1 on CPU tensors against the float64 recurrence (ssm1_reference.py):
forward with gate and states, bfloat16; autograd through state_space_v1_backward against torch's
float64 autograd of the reference; opcheck of both ops; torch.compile (fullgraph); bad arguments
named."""
import numpy as np
import pytest

import ssm1_reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
from ejk.torch import state_space_v1  # noqa: E402

ops = torch.ops.ejk
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

ARGS = ("x", "A", "B", "C", "D", "dt", "gate", "initial_state")


def inputs(rng, b=2, s=13, d=24, n=16, gate=False, init=False, dtype=torch.float32):
    """Random operands as Mamba's projections give them: A in (-2, -0.5), dt a softplus."""
    def randn(*shape):
        return torch.from_numpy(rng.standard_normal(shape)).to(dtype)
    x = dict(x=randn(b, s, d), A=torch.from_numpy(-rng.uniform(0.5, 2.0, (d, n))).float(), B=randn(b, s, n),
             C=randn(b, s, n), D=torch.from_numpy(rng.standard_normal(d)).float(),
             dt=torch.from_numpy(np.log1p(np.exp(rng.normal(-1.0, 0.5, (b, s, d))))).to(dtype))
    if gate:
        x["gate"] = randn(b, s, d)
    if init:
        x["initial_state"] = torch.from_numpy(rng.standard_normal((b, d, n))).float()
    return x


def positional(x):
    return [x.get(name) for name in ARGS]


def expect(x):
    as64 = {name: numpy64(a) for name, a in x.items()}
    return ssm1_reference.state_space_v1(np, **as64)


@pytest.mark.parametrize("gate,init", [(False, False), (True, True)])
def test_forward(rng, gate, init):
    x = inputs(rng, gate=gate, init=init)
    y, h, conv = state_space_v1(*positional(x))
    want_y, want_h = expect(x)
    assert conv is None
    assert_rel_l2(y, want_y)
    assert_rel_l2(h, want_h)


def test_bfloat16(rng):
    x = inputs(rng, gate=True, init=True, dtype=torch.bfloat16)
    y, h, _ = state_space_v1(*positional(x))
    want_y, want_h = expect(x)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.bfloat16
    assert_rel_l2(y, want_y, "bfloat16")
    assert_rel_l2(h, want_h, "bfloat16")


@pytest.mark.parametrize("gate,init", [(True, True), (False, False)])
def test_gradients_of_every_input(rng, gate, init):
    x = inputs(rng, s=30, d=20, gate=gate, init=init)
    wanted = tuple(name for name in ARGS if name in x)
    w_y = torch.from_numpy(rng.standard_normal(tuple(x["x"].shape)))
    w_h = torch.from_numpy(rng.standard_normal((2, 20, 16)))

    def loss(y, h):
        return (y.double() * w_y).sum() + (h.double() * w_h).sum()

    given = {name: a.clone().requires_grad_() for name, a in x.items()}
    y, h, _ = state_space_v1(*positional(given))
    got = torch.autograd.grad(loss(y, h), [given[name] for name in wanted])
    ref = {name: a.detach().double().requires_grad_() for name, a in x.items()}
    ry, rh = ssm1_reference.state_space_v1(torch, **ref)
    want = torch.autograd.grad(loss(ry, rh), [ref[name] for name in wanted])
    for name, gr, wr in zip(wanted, got, want):
        assert gr.dtype == x[name].dtype, name
        assert_rel_l2(gr, numpy64(wr))


def test_opcheck(rng):
    x = {name: a.requires_grad_() for name, a in inputs(rng, s=9, gate=True, init=True).items()}
    torch.library.opcheck(ops.state_space_v1.default, tuple(positional(x)) + (None,))  # dense: no cu_seqlens
    d_y = torch.from_numpy(rng.standard_normal(tuple(x["x"].shape))).float()
    d_h = torch.from_numpy(rng.standard_normal(tuple(x["initial_state"].shape))).float()
    args = tuple(a.detach() for a in positional(x)) + (d_y, d_h, None)
    torch.library.opcheck(ops.state_space_v1_backward.default, args)


def test_compile_forward_and_backward(rng):
    x = {name: a.requires_grad_() for name, a in inputs(rng, gate=True, init=True).items()}

    def step(*args):
        y, h, _ = state_space_v1(*args)
        return y.square().sum() + h.sum()

    compiled = torch.compile(step, fullgraph=True)
    got = torch.autograd.grad(compiled(*positional(x)), positional(x))
    want = torch.autograd.grad(step(*positional(x)), positional(x))
    for gr, wr in zip(got, want):
        assert_rel_l2(gr, numpy64(wr))


def test_bad_arguments_are_named(rng):
    x = inputs(rng)
    with pytest.raises(ValueError, match="b: dim 2"):
        state_space_v1(*positional(dict(x, B=x["B"][..., :-1])))
    with pytest.raises(NotImplementedError, match="cfg"):
        state_space_v1(*positional(x), cfg=object())
