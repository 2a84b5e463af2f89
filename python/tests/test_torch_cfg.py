"""cfg= in ejk.torch: an op's tuning values carried through its custom op's `tune` argument (one
int per tuning axis), eager and under torch.compile; checked by libejk against the spec; not
inherited by the gradient; refused by name for ops without tuning axes."""
import pytest

import reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
import ejk.torch  # noqa: E402
from ejk.torch import flash_attention, flash_attention_with_lse, mean_pooling  # noqa: E402

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")
CFGS = [{"block_q": 32, "block_k": 32}, {"block_q": 128, "block_k": 64}, {"block_k": 128}]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


def _inputs(rng, requires_grad=False):
    def randn(*shape):
        return torch.from_numpy(rng.standard_normal(shape)).float().requires_grad_(requires_grad)
    return randn(1, 40, 2, 64), randn(1, 56, 1, 64), randn(1, 56, 1, 64)


@pytest.mark.parametrize("cfg", CFGS, ids=str)
def test_cfg_gives_the_reference_eager_and_compiled(rng, cfg):
    q, k, v = _inputs(rng)
    want, _ = reference.flash_attention(numpy64(q), numpy64(k), numpy64(v), causal=True)
    assert_rel_l2(flash_attention(q, k, v, causal=True, cfg=cfg), want)
    compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v, causal=True, cfg=cfg), fullgraph=True)
    assert_rel_l2(compiled(q, k, v), want)


def test_the_schema_carries_one_value_per_tuning_axis(rng):
    q, k, v = _inputs(rng)
    schema = str(torch.ops.ejk.flash_attention.default._schema)
    assert "int[]? tune=None" in schema
    assert "tune" not in str(torch.ops.ejk.mean_pooling.default._schema)
    # Every optional argument between v and tune left out.
    args = (q, k, v) + (None,) * (len(torch.ops.ejk.flash_attention.default._schema.arguments) - 4)
    torch.library.opcheck(torch.ops.ejk.flash_attention.default, args + ([32, 0],))
    with pytest.raises(RuntimeError, match="block_q = 7"):  # the value reached libejk, which refuses it
        torch.ops.ejk.flash_attention.default(*args, [7, 0])
    with pytest.raises(RuntimeError, match="tune: expected 2 values"):
        torch.ops.ejk.flash_attention.default(*args, [32])


def test_gradients_do_not_inherit_the_forward_cfg(rng):
    q, k, v = _inputs(rng, requires_grad=True)

    def grads(cfg):
        out, lse = flash_attention_with_lse(q, k, v, causal=True, cfg=cfg)
        return torch.autograd.grad((out ** 2).sum() + lse.sum(), (q, k, v))

    base = grads(None)
    for got, want in zip(grads({"block_q": 32, "block_k": 32}), base):
        assert_rel_l2(got, numpy64(want))


@pytest.mark.parametrize("cfg, words", [
    ({"block_q": 7}, "block_q"),               # a value the kernels do not take (libejk)
    ({"no_such_axis": 1}, "no_such_axis"),     # not a tuning axis of the op
    ({"block_q": 0}, r"cfg\['block_q'\]"),
])
def test_bad_cfg_is_refused_by_name_eager_and_compiled(rng, cfg, words):
    q, k, v = _inputs(rng)
    with pytest.raises(ValueError, match=words):
        flash_attention(q, k, v, cfg=cfg)
    compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v, cfg=cfg), fullgraph=True)
    with pytest.raises(Exception, match=words):
        compiled(q, k, v)


def test_an_op_without_tuning_axes_refuses_cfg_naming_it(rng):
    x = torch.from_numpy(rng.standard_normal((2, 8, 16))).float()
    for error in (ValueError, NotImplementedError):
        with pytest.raises(error, match="cfg: mean_pooling has no tuning axes"):
            mean_pooling(x, cfg={"block_q": 64})
    assert_rel_l2(mean_pooling(x, cfg=None), numpy64(x).mean(axis=1))


def test_an_overlay_reaches_eager_and_compiled_calls(rng):
    import ejk.ops
    q, k, v = _inputs(rng)
    compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v), fullgraph=True)
    want, _ = reference.flash_attention(numpy64(q), numpy64(k), numpy64(v))
    assert_rel_l2(compiled(q, k, v), want)
    with ejk.ops.overlay_cache({"flash_attention": {"block_q": 7}}):  # libejk refuses 7: it arrived
        with pytest.raises(ValueError, match="block_q"):
            flash_attention(q, k, v)
        with pytest.raises(Exception, match="block_q"):
            compiled(q, k, v)  # the graph traced outside is guarded on the overlays: traced again
        assert_rel_l2(flash_attention(q, k, v, cfg={"block_q": 32}), want)
    assert_rel_l2(compiled(q, k, v), want)
