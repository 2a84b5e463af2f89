"""ejk.torch's linear attention wrappers on CPU tensors: gla_attention and lightning_attention
(over recurrent_attention), gated_delta_rule and kernel_delta_attention / kda_decay (over
gated_delta_rule), forward against the float64 recurrences and autograd against torch's float64
autograd of them; opcheck of the gated delta rule ops."""
import numpy as np
import pytest

import delta_reference
import recurrent_reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
from ejk.ops.lightning_attention import lightning_decay  # noqa: E402
from ejk.torch import (gated_delta_rule, gla_attention, kda_decay, kernel_delta_attention,  # noqa: E402
                       lightning_attention)

ops = torch.ops.ejk
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def randn(rng, *shape, dtype=torch.float32):
    return torch.from_numpy(rng.standard_normal(shape)).to(dtype)


def delta_inputs(rng, b=2, t=15, h=3, k=16, v=24, segments=False):
    x = dict(q=randn(rng, b, t, h, k), k=randn(rng, b, t, h, k), v=randn(rng, b, t, h, v),
             beta=torch.sigmoid(randn(rng, b, t, h)),
             decay=-torch.nn.functional.softplus(-(randn(rng, b, t, h) + 2)),
             initial_state=randn(rng, b, h, k, v))
    if segments:
        x["seg_ids"] = torch.from_numpy(np.cumsum(rng.uniform(size=(b, t)) < 0.2, axis=1).astype(np.int32))
    return x


def positional(x):
    return [x.get(n) for n in ("q", "k", "v", "beta", "decay", "seg_ids", "initial_state")]


def check_grads(run, reference, x, names, rng):
    """autograd of sum(o * w) + sum(state * w') through run against float64 autograd of reference."""
    w_o, w_s = randn(rng, *x["v"].shape), randn(rng, *x["initial_state"].shape)
    leaves = {n: x[n].clone().requires_grad_(True) for n in names}
    o, state = run({**x, **leaves})
    ((o * w_o).sum() + (state.float() * w_s).sum()).backward()
    x64 = {n: a.double() if a.is_floating_point() else a for n, a in x.items()}
    leaves64 = {n: x64[n].clone().requires_grad_(True) for n in names}
    o, state = reference({**x64, **leaves64})
    ((o * w_o.double()).sum() + (state * w_s.double()).sum()).backward()
    for n in names:
        assert_rel_l2(leaves[n].grad, numpy64(leaves64[n].grad))


def test_gla_and_lightning(rng):
    b, t, h, k, v = 2, 17, 4, 16, 24
    x = dict(q=randn(rng, b, t, h, k), k=randn(rng, b, t, h, k), v=randn(rng, b, t, h, v),
             g=torch.from_numpy(-rng.uniform(0, 1, (b, t, h, k))).float(),
             g_gamma=torch.from_numpy(-rng.uniform(0, 0.5, h)).float(), initial_state=randn(rng, b, h, k, v))
    o, state = gla_attention(x["q"], x["k"], x["v"], x["g"], x["g_gamma"], x["initial_state"], return_state=True)
    want = recurrent_reference.recurrent_attention(np, **{n: numpy64(a) for n, a in x.items()})
    assert_rel_l2(o, want[0])
    assert_rel_l2(state, want[1])
    check_grads(lambda a: gla_attention(a["q"], a["k"], a["v"], a["g"], a["g_gamma"], a["initial_state"],
                                        return_state=True),
                lambda a: recurrent_reference.recurrent_attention(torch, **a), x, ("q", "k", "v", "g", "initial_state"),
                rng)
    y = {n: x[n] for n in ("q", "k", "v", "initial_state")}
    gamma = torch.from_numpy(lightning_decay(h, 3, 8).astype(np.float64))
    o = lightning_attention(y["q"], y["k"], y["v"], y["initial_state"], layer_idx=3, num_layers=8)
    assert_rel_l2(o, recurrent_reference.recurrent_attention(np, **{n: numpy64(a) for n, a in y.items()},
                                                             g_gamma=gamma.numpy())[0])
    check_grads(lambda a: lightning_attention(a["q"], a["k"], a["v"], a["initial_state"], layer_idx=3, num_layers=8,
                                              return_state=True),
                lambda a: recurrent_reference.recurrent_attention(torch, **a, g_gamma=gamma), y,
                ("q", "k", "v", "initial_state"), rng)


@pytest.mark.parametrize("segments", [False, True])
def test_gated_delta_rule(rng, segments):
    x = delta_inputs(rng, segments=segments)
    o, state = gated_delta_rule(*positional(x), return_state=True)
    want = delta_reference.gated_delta_rule(np, **{n: numpy64(a) for n, a in x.items()})
    assert o.dtype == torch.float32 and state.dtype == torch.float32
    assert_rel_l2(o, want[0])
    assert_rel_l2(state, want[1])
    check_grads(lambda a: gated_delta_rule(*positional(a), return_state=True),
                lambda a: delta_reference.gated_delta_rule(torch, **a), x,
                ("q", "k", "v", "beta", "decay", "initial_state"), rng)


def test_kernel_delta_attention_and_kda_decay(rng):
    x = delta_inputs(rng)
    args = [x[n] for n in ("q", "k", "v", "beta", "decay", "initial_state")]
    o, state = kernel_delta_attention(*args, softmax_scale=0.3, return_state=True)
    want = delta_reference.gated_delta_rule(np, **{n: numpy64(a) for n, a in x.items()}, softmax_scale=0.3)
    assert_rel_l2(o, want[0])
    assert_rel_l2(state, want[1])
    gate, a_log, bias = randn(rng, 2, 5, 3), randn(rng, 3), randn(rng, 3)
    assert_rel_l2(kda_decay(gate, a_log, bias), -np.exp(numpy64(a_log)) * np.log1p(np.exp(numpy64(gate + bias))))


def test_opcheck(rng):
    x = delta_inputs(rng, t=6, segments=True)
    args = (x["q"], x["k"], x["v"], x["beta"], x["decay"], x["seg_ids"], x["initial_state"])
    torch.library.opcheck(ops.gated_delta_rule.default, args + (None, True),
                          test_utils=("test_schema", "test_faketensor"))
