"""ejk.torch.recurrent_attention on CPU tensors against the float64 recurrence
(recurrent_reference.py): forward with the gates, states, reverse, packed varlen and bfloat16;
autograd through recurrent_attention_backward against torch's float64 autograd of the reference;
opcheck of both ops; torch.compile (fullgraph) forward and backward; bad arguments named."""
import numpy as np
import pytest

import recurrent_reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64, poison

torch = import_torch()
from ejk._kit import ArgumentTypeError  # noqa: E402
from ejk.torch import recurrent_attention  # noqa: E402

ops = torch.ops.ejk
# Gated variants are compiled on first use (the built-in set has the plain ones).
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

ARGS = ("q", "k", "v", "g", "g_gamma", "gk", "gv", "initial_state")
DIFFERENTIABLE = ("q", "k", "v", "g", "gk", "gv", "initial_state")
ALL_GATES = ("g", "g_gamma", "gk", "gv")


def inputs(rng, b=2, t=23, h=3, k=16, v=32, gates=(), init=False, dtype=torch.float32, n=None):
    """Random operands: gates are log decays in (-1, 0); n: varlen with n sequences ([1, t, h, *]
    tokens, n initial states)."""
    rows = 1 if n is not None else b
    def randn(*shape):
        return torch.from_numpy(rng.standard_normal(shape)).to(dtype)
    def decay(*shape):
        return torch.from_numpy(-rng.uniform(0.0, 1.0, shape)).to(dtype)
    x = dict(q=randn(rows, t, h, k), k=randn(rows, t, h, k), v=randn(rows, t, h, v))
    if "g" in gates:
        x["g"] = decay(rows, t, h, k)
    if "g_head" in gates:  # the seed's Triton g: one per token and head
        x["g"] = decay(rows, t, h)
    if "g_gamma" in gates:
        x["g_gamma"] = torch.from_numpy(-rng.uniform(0.0, 0.5, h)).float()
    if "gk" in gates:
        x["gk"] = decay(rows, t, h, k)
    if "gv" in gates:
        x["gv"] = decay(rows, t, h, v)
    if init:
        x["initial_state"] = torch.from_numpy(rng.standard_normal((n if n is not None else b, h, k, v))).float()
    return x


def positional(x, cu=None):
    return [x.get(name) for name in ARGS] + [cu]


def expect(x, cu=None, **opts):
    as64 = {name: numpy64(a) for name, a in x.items()}
    return recurrent_reference.recurrent_attention(np, **as64, cu_seqlens=None if cu is None else cu.tolist(), **opts)


CASES = {
    "plain": dict(),
    "gates_and_initial_state": dict(gates=ALL_GATES, init=True),
    "g_gamma_reverse_scale": dict(gates=("g_gamma",), opts=dict(reverse=True, softmax_scale=0.4)),
}


@pytest.mark.parametrize("name", CASES)
def test_forward(rng, name):
    case = CASES[name]
    x = inputs(rng, gates=case.get("gates", ()), init=case.get("init", False))
    opts = case.get("opts", {})
    poison(torch, "cpu", x["v"].shape, (2, 3, 16, 32))
    o, state = recurrent_attention(*positional(x), return_state=True, **opts)
    want_o, want_state = expect(x, **opts)
    assert o.dtype == torch.float32 and state.dtype == torch.float32
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)


def test_varlen_with_an_empty_sequence(rng):
    cu = torch.tensor([0, 9, 9, 30], dtype=torch.int32)
    x = inputs(rng, t=30, gates=ALL_GATES, init=True, n=3)
    packed = {name: a if name in ("g_gamma", "initial_state") else a[0] for name, a in x.items()}
    o, state = recurrent_attention(*positional(packed, cu), return_state=True, reverse=True)
    want_o, want_state = expect(x, cu, reverse=True)
    assert_rel_l2(o.reshape(want_o.shape), want_o)
    assert_rel_l2(state, want_state)
    assert_rel_l2(state[1], numpy64(x["initial_state"][1]))


def test_bfloat16_and_strided_tokens(rng):
    x = inputs(rng, k=64, v=64, gates=("g", "gv"), init=True, dtype=torch.bfloat16)
    x["q"] = x["q"].transpose(1, 2).contiguous().transpose(1, 2)  # [B, H, T, K] memory, [B, T, H, K] view
    o, state = recurrent_attention(*positional(x), return_state=True)
    assert o.dtype == torch.bfloat16 and state.dtype == torch.float32
    want_o, want_state = expect(x)
    assert_rel_l2(o, want_o, "bfloat16")
    assert_rel_l2(state, want_state, "bfloat16")


# --- autograd ----------------------------------------------------------------------------------

def check_grads(rng, x, cu=None, with_state=True, dtype_name="float32", **opts):
    """Gradients of sum(o * w) (+ sum(final_state * w2)) against torch's float64 autograd of the
    reference on the same values."""
    wanted = tuple(name for name in DIFFERENTIABLE if name in x)
    n = x["q"].shape[0] if cu is None else len(cu) - 1
    w_o = torch.from_numpy(rng.standard_normal(tuple(x["v"].shape)))
    w_state = torch.from_numpy(rng.standard_normal((n,) + tuple(x["q"].shape[2:]) + tuple(x["v"].shape[-1:])))

    def loss(o, state):
        value = (o.double() * w_o).sum()
        return value + (state.double() * w_state).sum() if with_state else value

    given = {name: a.clone().requires_grad_(name in wanted) for name, a in x.items()}
    o, state = recurrent_attention(*positional(given, cu), return_state=True, **opts)
    got = torch.autograd.grad(loss(o, state), [given[name] for name in wanted])
    ref = {name: a.detach().double().requires_grad_(name in wanted) for name, a in x.items()}
    ro, rstate = recurrent_reference.recurrent_attention(torch, **ref, cu_seqlens=None if cu is None else cu.tolist(),
                                                         **opts)
    want = torch.autograd.grad(loss(ro, rstate), [ref[name] for name in wanted])
    for name, gr, wr in zip(wanted, got, want):
        assert gr.dtype == x[name].dtype, name
        assert_rel_l2(gr, numpy64(wr), dtype_name)


def test_gradients_of_every_input(rng):
    check_grads(rng, inputs(rng, gates=ALL_GATES, init=True))


def test_gradients_reverse_scaled_without_the_state(rng):
    check_grads(rng, inputs(rng, gates=("gk", "g_gamma")), with_state=False, reverse=True, softmax_scale=0.7)


def test_gradients_varlen(rng):
    cu = torch.tensor([0, 5, 5, 17, 26], dtype=torch.int32)
    check_grads(rng, inputs(rng, t=26, gates=("g", "gv", "g_gamma"), init=True, n=4), cu)


def test_gradients_bfloat16(rng):
    check_grads(rng, inputs(rng, t=16, k=64, v=64, gates=("g",), init=True, dtype=torch.bfloat16),
                dtype_name="bfloat16")


def test_per_head_g_forward_and_gradients(rng):
    """g [B, T, H] (simple GLA): the op's g_head, differentiated as g broadcast along K."""
    check_grads(rng, inputs(rng, gates=("g_head", "g_gamma"), init=True))
    cu = torch.tensor([0, 40, 40, 70], dtype=torch.int32)
    check_grads(rng, inputs(rng, t=70, k=64, v=64, gates=("g_head",), init=True, n=3), cu, reverse=True)


def test_o_alone_backward_through_expanded_gradient(rng):
    """o.sum()'s gradient is an expanded tensor (stride 0), copied before the kernel reads it."""
    x = {name: a.requires_grad_() for name, a in inputs(rng, gates=("gv",)).items()}
    recurrent_attention(*positional(x)).sum().backward()
    ref = {name: a.detach().double().requires_grad_() for name, a in x.items()}
    recurrent_reference.recurrent_attention(torch, **ref)[0].sum().backward()
    for name in x:
        assert_rel_l2(x[name].grad, numpy64(ref[name].grad))


def test_final_state_alone_backward(rng):
    """Only final_state in the loss: o's gradient reaches the backward op as zeros, so q's is 0."""
    x = {name: a.requires_grad_() for name, a in inputs(rng, gates=("g",), init=True).items()}
    recurrent_attention(*positional(x), return_state=True)[1].sum().backward()
    ref = {name: a.detach().double().requires_grad_() for name, a in x.items()}
    recurrent_reference.recurrent_attention(torch, **ref)[1].sum().backward()
    assert (x["q"].grad == 0).all()
    for name in ("k", "v", "g", "initial_state"):
        assert_rel_l2(x[name].grad, numpy64(ref[name].grad))


def test_no_second_derivative(rng):
    x = inputs(rng)
    q = x["q"].requires_grad_()
    (dq,) = torch.autograd.grad(recurrent_attention(q, x["k"], x["v"]).sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="recurrent_attention_backward"):
        dq.sum().backward()


# --- torch.library and torch.compile -----------------------------------------------------------

def op_args(x, cu=None, scale=None, reverse=None, g_head=None):
    """The op's schema order: the seed's tensors, cu_seqlens, g_head, then the scalars."""
    return tuple(positional(x, cu)) + (g_head, scale, reverse)


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_opcheck(rng, varlen):
    cu = torch.tensor([0, 6, 6, 20], dtype=torch.int32) if varlen else None
    x = inputs(rng, t=20, gates=("g", "gv"), init=True, n=3 if varlen else None)
    x = {name: a.requires_grad_() for name, a in x.items()}
    torch.library.opcheck(ops.recurrent_attention.default, op_args(x, cu, 0.5, True))
    g_head = torch.from_numpy(-rng.uniform(0.0, 1.0, tuple(x["q"].shape[:-1]))).float().requires_grad_()
    torch.library.opcheck(ops.recurrent_attention.default, op_args({**x, "g": None}, cu, 0.5, True, g_head))
    d_o = torch.from_numpy(rng.standard_normal(tuple(x["v"].shape))).float()
    d_state = torch.from_numpy(rng.standard_normal(tuple(x["initial_state"].shape))).float()
    backward_args = tuple(a.detach() if a is not None else None for a in positional(x, cu)) + (d_o, d_state, None, 0.5,
                                                                                              True)
    torch.library.opcheck(ops.recurrent_attention_backward.default, backward_args)  # no second derivative


def test_compile_forward_and_backward(rng):
    x = {name: a.requires_grad_() for name, a in inputs(rng, gates=("g", "g_gamma"), init=True).items()}

    def step(q, k, v, g, g_gamma, h0):
        o, state = recurrent_attention(q, k, v, g, g_gamma, None, None, h0, return_state=True, reverse=True)
        return o.square().sum() + state.sum()

    compiled = torch.compile(step, fullgraph=True)
    names = ("q", "k", "v", "g", "g_gamma", "initial_state")
    got = torch.autograd.grad(compiled(*(x[n] for n in names)), [x[n] for n in names if n != "g_gamma"])
    want = torch.autograd.grad(step(*(x[n] for n in names)), [x[n] for n in names if n != "g_gamma"])
    for gr, wr in zip(got, want):
        assert_rel_l2(gr, numpy64(wr))


# --- bad arguments -----------------------------------------------------------------------------

def test_bad_arguments_are_named(rng):
    x = inputs(rng, gates=("g",))
    q, k, v = x["q"], x["k"], x["v"]
    with pytest.raises(ValueError, match=r"\bk\b"):
        recurrent_attention(q, k[:, :5], v)
    with pytest.raises(ValueError, match=r"\bg\b"):
        recurrent_attention(q, k, v, x["g"][..., :3])  # K 3, not 16
    with pytest.raises(ValueError, match=r"\bg_head\b"):  # a per-head g [B, T, H] is the op's g_head
        recurrent_attention(q, k, v, x["g"][:, :, :2, 0])
    with pytest.raises(ValueError, match="initial_state"):
        recurrent_attention(q, k, v, None, None, None, None, torch.zeros((2, 3, 16, 32), dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="softmax_scale"):
        recurrent_attention(q, k, v, softmax_scale=float("nan"))
    with pytest.raises(ArgumentTypeError, match="^return_state"):
        recurrent_attention(q, k, v, return_state=1)
    with pytest.raises(ArgumentTypeError, match="^value"):
        recurrent_attention(q, k, v.numpy())
    with pytest.raises(ValueError, match="cu_seqlens"):  # not ending at the packed token count
        recurrent_attention(q[0], k[0], v[0], None, None, None, None, None, torch.tensor([0, 5], dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="cfg"):
        recurrent_attention(q, k, v, cfg={})
