"""ejk.jax.recurrent_attention under jax.jit against the float64 recurrence (recurrent_reference.py):
the gates, initial and final states, reverse, packed varlen (with an empty sequence), bfloat16;
jax.grad through recurrent_attention_backward against JAX's float64 autodiff of the reference;
vmap; bad arguments named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import recurrent_reference
from ejk._kit import ArgumentTypeError
from ejk.jax import recurrent_attention
from torch_support import assert_rel_l2, no_cpu_jit

# Gated variants are compiled on first use (the built-in set has the plain ones).
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

ARGS = ("q", "k", "v", "g", "g_gamma", "gk", "gv", "initial_state")
DIFFERENTIABLE = ("q", "k", "v", "g", "gk", "gv", "initial_state")


def inputs(rng, b=2, t=23, h=3, k=16, v=32, gates=(), init=False, dtype=jnp.float32, n=None):
    """Random operands: gates are log decays in (-1, 0) (a state neither vanishes nor grows);
    n: varlen with n sequences ([1, t, h, *] tokens, n initial states)."""
    rows = 1 if n is not None else b
    def randn(*shape):
        return jnp.asarray(rng.standard_normal(shape), dtype)
    def decay(*shape):
        return jnp.asarray(-rng.uniform(0.0, 1.0, shape), dtype)
    x = dict(q=randn(rows, t, h, k), k=randn(rows, t, h, k), v=randn(rows, t, h, v))
    if "g" in gates:
        x["g"] = decay(rows, t, h, k)
    if "g_head" in gates:  # the seed's Triton g: one per token and head
        x["g"] = decay(rows, t, h)
    if "g_gamma" in gates:
        x["g_gamma"] = jnp.asarray(-rng.uniform(0.0, 0.5, h), jnp.float32)
    if "gk" in gates:
        x["gk"] = decay(rows, t, h, k)
    if "gv" in gates:
        x["gv"] = decay(rows, t, h, v)
    if init:
        x["initial_state"] = jnp.asarray(rng.standard_normal((n if n is not None else b, h, k, v)), jnp.float32)
    return x


def positional(x, cu=None):
    return [x.get(name) for name in ARGS] + [cu]


def expect(x, cu=None, **opts):
    """The float64 reference's (o, final_state) on the values the op saw."""
    as64 = {name: np.asarray(a, np.float64) for name, a in x.items()}
    return recurrent_reference.recurrent_attention(np, **as64, cu_seqlens=None if cu is None else list(cu), **opts)


ALL_GATES = ("g", "g_gamma", "gk", "gv")
CASES = {
    "plain": dict(),
    "gates_and_initial_state": dict(gates=ALL_GATES, init=True),
    "g_gamma_reverse_scale": dict(gates=("g_gamma",), opts=dict(reverse=True, softmax_scale=0.4)),
    "gv_init_reverse": dict(gates=("gv",), init=True, opts=dict(reverse=True)),
}


@pytest.mark.parametrize("name", CASES)
def test_forward(rng, name):
    case = CASES[name]
    x = inputs(rng, gates=case.get("gates", ()), init=case.get("init", False))
    opts = case.get("opts", {})
    o, state = jax.jit(lambda *a: recurrent_attention(*a, return_state=True, **opts))(*positional(x))
    want_o, want_state = expect(x, **opts)
    assert o.shape == x["v"].shape and o.dtype == jnp.float32 and state.dtype == jnp.float32
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)
    assert_rel_l2(recurrent_attention(*positional(x), **opts), want_o)  # o alone, eagerly


@pytest.mark.parametrize("leading_one", [False, True], ids=["t_h_k", "1_t_h_k"])
def test_varlen_with_an_empty_sequence(rng, leading_one):
    cu = np.array([0, 9, 9, 30], np.int32)
    x = inputs(rng, t=30, gates=ALL_GATES, init=True, n=3)
    packed = {name: a if leading_one or name in ("g_gamma", "initial_state") else a[0] for name, a in x.items()}
    o, state = jax.jit(lambda *a: recurrent_attention(*a, return_state=True, reverse=True))(
        *positional(packed, jnp.asarray(cu)))
    want_o, want_state = expect(x, cu, reverse=True)
    assert_rel_l2(o.reshape(want_o.shape), want_o)
    assert_rel_l2(state, want_state)
    assert_rel_l2(state[1], np.asarray(x["initial_state"][1]))  # no tokens: the state as it came


def test_bfloat16(rng):
    x = inputs(rng, k=64, v=64, gates=("g", "gv"), init=True, dtype=jnp.bfloat16)
    o, state = jax.jit(lambda *a: recurrent_attention(*a, return_state=True))(*positional(x))
    assert o.dtype == jnp.bfloat16 and state.dtype == jnp.float32
    want_o, want_state = expect(x)
    assert_rel_l2(o, want_o, "bfloat16")
    assert_rel_l2(state, want_state, "bfloat16")


# --- gradients ---------------------------------------------------------------------------------

def loss_weights(rng, o_shape, state_shape):
    return np.asarray(rng.standard_normal(o_shape)), np.asarray(rng.standard_normal(state_shape))


def expected_grads(x, cu, w_o, w_state, with_state, **opts):
    """JAX's float64 autodiff of the reference's loss, in x64 mode for this computation only."""
    with jax.enable_x64(True):
        wanted = tuple(name for name in DIFFERENTIABLE if name in x)
        fixed = {name: jnp.asarray(np.asarray(a, np.float64)) for name, a in x.items() if name not in wanted}

        def loss(*diff):
            args = {**fixed, **dict(zip(wanted, diff))}
            o, state = recurrent_reference.recurrent_attention(
                jnp, **args, cu_seqlens=None if cu is None else list(cu), **opts)
            value = (o * w_o).sum()
            return value + (state * w_state).sum() if with_state else value

        grads = jax.grad(loss, argnums=tuple(range(len(wanted))))(
            *(jnp.asarray(np.asarray(x[name], np.float64)) for name in wanted))
        return {name: np.asarray(gr) for name, gr in zip(wanted, grads)}


def check_grads(x, cu=None, with_state=True, dtype_name="float32", rng=None, **opts):
    wanted = tuple(name for name in DIFFERENTIABLE if name in x)
    n = x["q"].shape[0] if cu is None else len(cu) - 1
    w_o, w_state = loss_weights(rng, x["v"].shape, (n,) + x["q"].shape[2:] + x["v"].shape[-1:])

    def loss(*diff):
        args = {**x, **dict(zip(wanted, diff))}
        o, state = recurrent_attention(*positional(args, None if cu is None else jnp.asarray(cu)),
                                       return_state=True, **opts)
        value = (o.astype(jnp.float32) * w_o).sum()
        return value + (state * w_state).sum() if with_state else value

    got = jax.jit(jax.grad(loss, argnums=tuple(range(len(wanted)))))(*(x[name] for name in wanted))
    want = expected_grads(x, cu, w_o, w_state, with_state, **opts)
    for name, gr in zip(wanted, got):
        assert gr.dtype == x[name].dtype, name
        assert_rel_l2(gr, want[name], dtype_name)


def test_gradients_of_every_input(rng):
    check_grads(inputs(rng, gates=ALL_GATES, init=True), rng=rng)


def test_gradients_reverse_scaled_without_the_state(rng):
    check_grads(inputs(rng, gates=("gk", "g_gamma")), with_state=False, rng=rng, reverse=True, softmax_scale=0.7)


def test_gradients_varlen(rng):
    cu = np.array([0, 5, 5, 17, 26], np.int32)
    check_grads(inputs(rng, t=26, gates=("g", "gv", "g_gamma"), init=True, n=4), cu, rng=rng)


def test_gradients_bfloat16(rng):
    check_grads(inputs(rng, t=16, k=64, v=64, gates=("g",), init=True, dtype=jnp.bfloat16), rng=rng,
                dtype_name="bfloat16")


def test_per_head_g_forward_and_gradients(rng):
    """g [B, T, H] (simple GLA): the op's g_head, differentiated as g broadcast along K."""
    x = inputs(rng, gates=("g_head", "g_gamma"), init=True)
    o, state = jax.jit(lambda *a: recurrent_attention(*a, return_state=True))(*positional(x))
    want_o, want_state = expect(x)
    assert_rel_l2(o, want_o)
    assert_rel_l2(state, want_state)
    check_grads(x, rng=rng)


def test_per_head_g_varlen_bfloat16(rng):
    cu = np.array([0, 40, 40, 70], np.int32)
    check_grads(inputs(rng, t=70, k=64, v=64, gates=("g_head",), init=True, n=3), cu, rng=rng, reverse=True)
    x = inputs(rng, t=16, k=64, v=64, gates=("g_head",), init=True, dtype=jnp.bfloat16)
    check_grads(x, rng=rng, dtype_name="bfloat16")


def test_final_state_alone(rng):
    """Only final_state in the loss: o's cotangent reaches the backward op as zeros, so q's is 0."""
    x = inputs(rng, gates=("g",), init=True)
    dq, dk = jax.grad(lambda q, k: recurrent_attention(*positional({**x, "q": q, "k": k}), return_state=True)[1].sum(),
                      argnums=(0, 1))(x["q"], x["k"])
    assert not np.asarray(dq).any()
    with jax.enable_x64(True):
        want = jax.grad(lambda k: recurrent_reference.recurrent_attention(
            jnp, **{n: jnp.asarray(np.asarray(a, np.float64)) for n, a in x.items() if n != "k"}, k=k)[1].sum())(
            jnp.asarray(np.asarray(x["k"], np.float64)))
    assert_rel_l2(dk, np.asarray(want))


def test_g_and_gk_get_the_same_gradient(rng):
    x = inputs(rng, gates=("g", "gk"))
    dg, dgk = jax.grad(lambda g, gk: recurrent_attention(x["q"], x["k"], x["v"], g, None, gk).sum(),
                       argnums=(0, 1))(x["g"], x["gk"])
    np.testing.assert_array_equal(np.asarray(dg), np.asarray(dgk))


# --- vmap --------------------------------------------------------------------------------------

def test_vmap_folds_into_the_batch(rng):
    x = inputs(rng, b=2, gates=("g", "g_gamma"), init=True)
    stacked = {name: jnp.stack([a, a[::-1] * 0.5 if name != "g_gamma" else a]) for name, a in x.items()}
    fn = jax.jit(jax.vmap(lambda q, k, v, g, h0: recurrent_attention(q, k, v, g, x["g_gamma"], None, None, h0,
                                                                      return_state=True)))
    o, state = fn(*(stacked[name] for name in ("q", "k", "v", "g", "initial_state")))
    for i in range(2):
        want_o, want_state = expect({**{name: a[i] for name, a in stacked.items()}, "g_gamma": x["g_gamma"]})
        assert_rel_l2(o[i], want_o)
        assert_rel_l2(state[i], want_state)


def test_vmap_of_varlen_and_of_the_gradient(rng):
    cu = jnp.asarray([0, 4, 12], jnp.int32)
    xs = [inputs(rng, t=12, gates=("gv",), n=2) for _ in range(3)]
    q, k, v, gv = (jnp.stack([x[name] for x in xs]) for name in ("q", "k", "v", "gv"))
    o = jax.vmap(lambda q, k, v, gv: recurrent_attention(q, k, v, None, None, None, gv, None, cu))(q, k, v, gv)
    for i, x in enumerate(xs):
        assert_rel_l2(o[i], expect(x, np.asarray(cu))[0])
    dq = jax.vmap(jax.grad(lambda q, k, v: recurrent_attention(q, k, v).sum()))(q, k, v)
    for i in range(3):
        assert_rel_l2(dq[i], jax.grad(lambda q: recurrent_attention(q, k[i], v[i]).sum())(q[i]))


# --- bad arguments -----------------------------------------------------------------------------

def test_bad_arguments_are_named(rng):
    x = inputs(rng, gates=("g",))
    q, k, v = x["q"], x["k"], x["v"]
    with pytest.raises(ValueError, match=r"\bk\b"):
        jax.block_until_ready(recurrent_attention(q, k[:, :5], v))
    with pytest.raises(ValueError, match=r"\bg\b"):
        jax.block_until_ready(recurrent_attention(q, k, v, x["g"][..., :3]))  # K 3, not 16
    with pytest.raises(ValueError, match=r"\bg_head\b"):  # a per-head g [B, T, H] is the op's g_head
        jax.block_until_ready(recurrent_attention(q, k, v, x["g"][:, :, :2, 0]))
    with pytest.raises(ValueError, match="initial_state"):
        jax.block_until_ready(recurrent_attention(q, k, v, None, None, None, None, jnp.zeros((2, 3, 16, 32), jnp.bfloat16)))
    with pytest.raises(ValueError, match="g_gamma"):
        jax.block_until_ready(recurrent_attention(q, k, v, None, jnp.zeros((4,), jnp.float32)))
    with pytest.raises(ValueError, match="softmax_scale"):
        jax.block_until_ready(recurrent_attention(q, k, v, softmax_scale=float("inf")))
    with pytest.raises(ArgumentTypeError, match="^return_state"):
        jax.block_until_ready(recurrent_attention(q, k, v, return_state="yes"))
    with pytest.raises(ArgumentTypeError, match="^reverse"):
        jax.block_until_ready(recurrent_attention(q, k, v, reverse=1))
    with pytest.raises(ArgumentTypeError, match="^query"):
        jax.block_until_ready(recurrent_attention(np.asarray(q).tolist(), k, v))
    with pytest.raises(ValueError, match="cu_seqlens"):
        jax.block_until_ready(recurrent_attention(q[0], k[0], v[0], None, None, None, None, None, jnp.asarray([0.0, 23.0])))
    # Offsets are data: checked when the call runs, and named there.
    with pytest.raises(jax.errors.JaxRuntimeError, match="cu_seqlens: last entry must equal the packed length 23"):
        jax.block_until_ready(recurrent_attention(q[0], k[0], v[0], None, None, None, None, None,
                                                  jnp.asarray([0, 5], jnp.int32)))
    with pytest.raises(ValueError, match="^platform: 'cuda' was asked for, but recurrent_attention runs on cpu"):
        jax.block_until_ready(recurrent_attention(q, k, v, platform="triton"))
    with pytest.raises(NotImplementedError, match="^platform: 'pallas'"):
        jax.block_until_ready(recurrent_attention(q, k, v, platform="pallas"))
    with pytest.raises(ValueError, match="reverse"):  # a traced option cannot become an attribute
        jax.jit(lambda r: recurrent_attention(q, k, v, reverse=r))(True)
