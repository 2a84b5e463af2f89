"""ejk.jax.flash_mla (flash_attention on up-projected K/V, differentiable through its custom VJP)
against a float64 reference (mla_reference.py): output and the gradients of every input, in the
seed's three logit modes, with GQA, causal, window, soft cap, bias, boolean mask, sinks, a V
head dim wider and narrower than q/K's, bfloat16 and packed varlen; then against the seed
itself on identical inputs, and its refusals."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_reference as ref
import seed_oracle
from ejk.jax import flash_mla
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

NAMES = ("query", "key_value", "w_kc", "w_vc", "b_q", "b_k", "bias", "softmax_aux")


def operands(rng, mode, b=2, t=11, hq=4, hkv=2, r=24, d_nope=16, d_rope=8, d_v=12, bias=None, sinks=None,
             dtype=jnp.float32):
    def randn(*shape, scale=1.0, dt=dtype):
        return jnp.asarray(rng.standard_normal(shape) * scale, dt)
    dq = d_nope + d_rope if mode == "rope_in_q" else d_nope
    x = dict(query=randn(b, t, hq, dq), key_value=randn(b, t, r), w_kc=randn(r, hkv, d_nope, scale=0.3),
             w_vc=randn(r, hkv, d_v, scale=0.3))
    if mode != "plain":
        x["b_k"] = randn(b, t, d_rope)
    if mode == "both":
        x["b_q"] = randn(b, t, d_rope)
    if bias is not None:
        x["bias"] = randn(*bias)
    if sinks is not None:
        x["softmax_aux"] = randn(*sinks, dt=jnp.float32)
    return x


def call(fn, a, cu_seqlens=None, **opts):
    """fn (ours or the reference) with the operands in a (a dict by NAMES)."""
    varlen = () if cu_seqlens is None else (cu_seqlens,)
    return fn(a["query"], a["key_value"], a["w_kc"], a["w_vc"], a.get("b_q"), a.get("b_k"), *varlen,
              bias=a.get("bias"), softmax_aux=a.get("softmax_aux"), **opts)


def check(rng, x, dtype_name="float32", **opts):
    names = [n for n in NAMES if n in x]
    out = call(flash_mla, x, **opts)
    w = jnp.asarray(rng.standard_normal(out.shape), jnp.float32)

    def loss(fn, weight):
        return lambda *args: jnp.sum(call(fn, dict(zip(names, args)), **opts).astype(weight.dtype) * weight)
    got = jax.jit(jax.grad(loss(flash_mla, w), argnums=tuple(range(len(names)))))(*(x[n] for n in names))
    with jax.enable_x64(True):
        x64 = [jnp.asarray(np.asarray(x[n], np.float64)) for n in names]
        w64 = jnp.asarray(np.asarray(w, np.float64))
        ref_opts = {k: v for k, v in opts.items() if k != "cu_seqlens"}
        want_out = call(ref.flash_mla, dict(zip(names, x64)), **ref_opts)
        want = jax.grad(loss(ref.flash_mla, w64), argnums=tuple(range(len(names))))(*x64)
    assert_rel_l2(np.asarray(out, np.float64), np.asarray(want_out), dtype_name=dtype_name)
    for n, g, e in zip(names, got, want):
        assert g.shape == x[n].shape, n
        g, e = np.asarray(g, np.float64), np.asarray(e)
        if dtype_name == "float32":
            assert_rel_l2(g, e)
        else:  # 16-bit gradients: 2e-2
            assert not np.isnan(g).any(), n
            assert np.linalg.norm(g - e) <= 2e-2 * np.linalg.norm(e), (n, np.linalg.norm(g - e) / np.linalg.norm(e))


def test_plain_gqa_causal(rng):
    check(rng, operands(rng, "plain"), causal=True)


def test_rope_in_query_window_sinks_per_head_vwider(rng):
    # d_v 32 > q/K's 24: q and K are zero-padded.
    check(rng, operands(rng, "rope_in_q", d_v=32, sinks=(4,)), sliding_window=(3, 2))


def test_both_rope_parts_softcap_shared_sinks_scale(rng):
    check(rng, operands(rng, "both", hkv=1, sinks=(1, 3)), causal=True, logits_soft_cap=2.5, softmax_scale=0.3)


def test_bias_broadcast_over_batch(rng):
    check(rng, operands(rng, "rope_in_q", bias=(1, 4, 11, 11)), sliding_window=4)


def test_boolean_mask(rng):
    x = operands(rng, "both")
    mask = rng.random((2, 1, 11, 11)) < 0.7
    mask[..., 0] = True  # every row sees a key: the seed's uniform rows over all-masked keys differ
    check(rng, x, attention_mask=jnp.asarray(mask), causal=True)


def test_bfloat16(rng):
    check(rng, operands(rng, "rope_in_q", d_nope=48, d_rope=16, d_v=32, dtype=jnp.bfloat16), causal=True,
          dtype_name="bfloat16")


def test_varlen_is_each_sequence_alone(rng):
    cu = np.array([0, 5, 5, 13], np.int32)
    x = operands(rng, "rope_in_q", b=1, t=13)
    names = [n for n in NAMES if n in x]
    out = call(flash_mla, x, causal=True, cu_seqlens=jnp.asarray(cu))
    for s, e in zip(cu[:-1], cu[1:]):
        if e > s:
            part = {n: x[n][:, s:e] if n != "w_kc" and n != "w_vc" else x[n] for n in names}
            with jax.enable_x64(True):
                want = call(ref.flash_mla, {n: jnp.asarray(np.asarray(v, np.float64)) for n, v in part.items()},
                            causal=True)
            assert_rel_l2(np.asarray(out[:, s:e], np.float64), np.asarray(want))


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
def test_matches_the_seed(rng):
    x = operands(rng, "rope_in_q", bias=(2, 1, 11, 11), sinks=(4, 2))
    ours = call(flash_mla, x, causal=True, sliding_window=5)
    args = [np.asarray(x.get(n)) if n in x else None for n in NAMES[:6]]
    (seed,) = seed_oracle.run("flash_mla", *args, bias=np.asarray(x["bias"]), softmax_aux=np.asarray(x["softmax_aux"]),
                              causal=True, sliding_window=5)
    assert_rel_l2(np.asarray(ours, np.float64), seed)


def test_refusals(rng):
    x = operands(rng, "plain")
    args = (x["query"], x["key_value"], x["w_kc"], x["w_vc"])
    with pytest.raises(NotImplementedError, match="dropout_prob"):
        jax.block_until_ready(flash_mla(*args, dropout_prob=0.1, deterministic=False, dropout_rng=jax.random.PRNGKey(0)))
    with pytest.raises(NotImplementedError, match="logits_soft_cap"):
        jax.block_until_ready(flash_mla(*args, bias=jnp.zeros((2, 4, 11, 11)), logits_soft_cap=3.0))
    with pytest.raises(ValueError, match="query: its head dim must be 24"):
        jax.block_until_ready(flash_mla(*args, None, jnp.zeros((2, 11, 8))))
    with pytest.raises(ValueError, match="w_vc"):
        jax.block_until_ready(flash_mla(*args[:3], jnp.zeros((5, 2, 12))))
    # dropout_prob is unused when deterministic, as in the seed.
    assert flash_mla(*args, dropout_prob=0.1).shape == (2, 11, 4, 12)
