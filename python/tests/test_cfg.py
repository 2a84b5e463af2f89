"""cfg= (ejk.jax): a mapping of an op's tuning axes to values, a hard override of the spec's heuristic and of
the tuning store, checked by libejk against the spec (the names and values the kernels take)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejk.jax


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((1, 40, 2, 64)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((1, 56, 1, 64)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((1, 56, 1, 64)), jnp.float32)
    return q, k, v


def test_cfg_block_sizes_give_the_same_attention():
    q, k, v = _inputs()
    base = ejk.jax.flash_attention(q, k, v, causal=True)
    for cfg in ({"block_q": 32, "block_k": 32}, {"block_q": 128, "block_k": 64}, {"block_k": 128}):
        got = jax.jit(lambda q, k, v, cfg=cfg: ejk.jax.flash_attention(q, k, v, causal=True, cfg=cfg))(q, k, v)
        err = float(jnp.linalg.norm(got - base) / jnp.linalg.norm(base))
        assert err <= 1e-5, (cfg, err)


def test_cfg_reaches_the_kernels_and_gradients_ignore_it():
    q, k, v = _inputs(1)

    def loss(q, cfg):
        return jnp.sum(ejk.jax.flash_attention(q, k, v, cfg=cfg) ** 2)

    g0 = jax.grad(loss)(q, None)
    g1 = jax.grad(loss)(q, {"block_q": 32, "block_k": 32})
    assert float(jnp.linalg.norm(g1 - g0) / jnp.linalg.norm(g0)) <= 1e-5


@pytest.mark.parametrize("cfg, error, words", [
    ({"block_q": 7}, ValueError, "block_q"),            # a value the kernels do not take
    ({"no_such_axis": 1}, ValueError, "no_such_axis"),  # not a tuning axis of the op
    ({"block_q": 1.5}, TypeError, "cfg['block_q']"),
    ("block_q=64", TypeError, "cfg: expected a mapping"),
])
def test_bad_cfg_is_refused_by_name(cfg, error, words):
    q, k, v = _inputs()
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        ejk.jax.flash_attention(q, k, v, cfg=cfg)



def test_cfg_reaches_the_ffi_call():
    q, k, v = _inputs()
    jaxpr = str(jax.make_jaxpr(lambda q, k, v: ejk.jax.flash_attention(q, k, v, cfg={"block_q": 32}))(q, k, v))
    assert "block_q" in jaxpr
    assert "block_q" not in str(jax.make_jaxpr(lambda q, k, v: ejk.jax.flash_attention(q, k, v))(q, k, v))


def test_wrappers_over_flash_attention_take_its_cfg():
    rng = np.random.default_rng(2)
    q = jnp.asarray(rng.standard_normal((3, 8, 64)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((3, 45, 2, 64)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((3, 45, 2, 64)), jnp.float32)
    start, end = jnp.asarray([0, 3, 10], jnp.int32), jnp.asarray([45, 20, 11], jnp.int32)
    base = ejk.jax.ragged_decode_attention(q, k, v, start, end)
    got = ejk.jax.ragged_decode_attention(q, k, v, start, end, cfg={"block_q": 32, "block_k": 32})
    assert float(jnp.linalg.norm(got - base) / jnp.linalg.norm(base)) <= 1e-5
    q, kv = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((1, 24, 4, 32), (1, 24, 16)))
    w_kc, w_vc = (jnp.asarray(rng.standard_normal((16, 2, 32)), jnp.float32) for _ in range(2))
    base = ejk.jax.flash_mla(q, kv, w_kc, w_vc, causal=True)
    got = ejk.jax.flash_mla(q, kv, w_kc, w_vc, causal=True, cfg={"block_k": 16})
    assert float(jnp.linalg.norm(got - base) / jnp.linalg.norm(base)) <= 1e-5
    with pytest.raises(ValueError, match="block_k"):
        ejk.jax.flash_mla(q, kv, w_kc, w_vc, cfg={"block_k": 24})


@pytest.mark.parametrize("call", [
    lambda x: ejk.jax.mean_pooling(x, cfg={"block_q": 64}),
    lambda x: ejk.jax.mean_pooling(x, cfg={}),
    lambda x: ejk.jax.recurrent_attention(x[..., None, :], x[..., None, :], x[..., None, :], cfg={"block_k": 16}),
])
def test_an_op_without_tuning_axes_refuses_cfg_naming_it(call):
    x = jnp.asarray(np.random.default_rng(3).standard_normal((2, 8, 16)), jnp.float32)
    for error in (ValueError, NotImplementedError):
        with pytest.raises(error, match="cfg: .* has no tuning axes"):
            call(x)


def test_the_seeds_config_objects_give_their_forward_block_sizes():
    import dataclasses

    from ejk.ops import BwdParams, FwdParams

    @dataclasses.dataclass
    class FlashAttentionConfig:  # the seed's shape of it: ejkernel.modules.operations.configs
        fwd_params: object = None
        bwd_params: object = None
        platform: str = "auto"
        backend: str = "any"

    q, k, v = _inputs(4)
    base = ejk.jax.flash_attention(q, k, v, causal=True)
    for cfg in (FlashAttentionConfig(FwdParams(q_blocksize=32, kv_blocksize=32)),
                FlashAttentionConfig({"q_blocksize": 128}), FlashAttentionConfig(bwd_params=BwdParams())):
        got = ejk.jax.flash_attention(q, k, v, causal=True, cfg=cfg)
        assert float(jnp.linalg.norm(got - base) / jnp.linalg.norm(base)) <= 1e-5
    jaxpr = str(jax.make_jaxpr(lambda q: ejk.jax.flash_attention(
        q, k, v, cfg=FlashAttentionConfig(FwdParams(q_blocksize=32))))(q))
    assert "block_q" in jaxpr
    with pytest.raises(ValueError, match="block_q"):
        ejk.jax.flash_attention(q, k, v, cfg=FlashAttentionConfig(FwdParams(q_blocksize=7)))
    with pytest.raises(NotImplementedError, match="cfg.fwd_params.num_warps"):
        ejk.jax.flash_attention(q, k, v, cfg=FlashAttentionConfig(FwdParams(num_warps=4)))
    with pytest.raises(NotImplementedError, match="cfg.bwd_params"):
        ejk.jax.flash_attention(q, k, v, cfg=FlashAttentionConfig(bwd_params=BwdParams(q_blocksize=64)))
    with pytest.raises(NotImplementedError, match="pallas"):
        ejk.jax.flash_attention(q, k, v, cfg=FlashAttentionConfig(FwdParams(q_blocksize=32), platform="pallas"))
