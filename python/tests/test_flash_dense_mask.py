"""ejk.jax.flash_attention with a MaskInfo whose mask only a dense term expresses: the kernel's
mask-reading variant (attention_mask) equals the float64 dense-masked softmax, eager and under jit
(where even a segment-shaped term stays dense), and jax.grad reaches q, k, v, bias and sinks as
JAX's float64 autodiff of the same masked softmax; random per-head masks of densities 0, 0.3 and
1 and a fully hidden row, with causal and a bias broadcast over heads."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejk.types
import flash_grad_reference as ref
import mask_cases
import reference
from conftest import assert_close
from ejk.jax import flash_attention
from ejk.types import MaskInfo
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")

CASES = mask_cases.cases(ejk.types)
DENSE_ONLY = ["dense-3d", "causal-batch-offset", "window-decode", "window-prefill", "kv-lengths",
              "token-types-union", "random", "materialized-segment-ids"]


def masked_softmax(q, k, v, mask, bias=None):
    """The float64 softmax of q k^T / sqrt(D) (+ bias) over the keys mask [B, H|1, Q, K] shows;
    rows it hides entirely give 0."""
    out = reference.flash_attention(q, k, v, bias=np.where(mask, 0.0, -np.inf) + (0 if bias is None else bias))[0]
    return np.nan_to_num(out)


@pytest.mark.parametrize("name", DENSE_ONLY + ["dense-4d-segments", "segments"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_dense_terms_run_on_the_mask_reading_variant(rng, name, jit):
    info = CASES[name]()
    mask = np.asarray(info.attention_mask)
    b, _, sq, sk = mask.shape
    q = jnp.asarray(rng.standard_normal((b, sq, 2, 64)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((b, sk, 2, 64)), jnp.float32) for _ in range(2))
    call = (lambda q, k, v, i: flash_attention(q, k, v, mask_info=i))
    out = (jax.jit(call) if jit else call)(q, k, v, info)
    want = masked_softmax(q, k, v, mask)
    ids = info.q_segment_ids
    if ids is not None:  # the seed's rows at -1 give 0
        want = np.where(np.asarray(ids)[:, :, None, None] >= 0, want, 0.0)
    assert_close(out, want)


def test_a_concrete_segment_mask_still_becomes_segment_ids():
    info = CASES["dense-4d-segments"]()
    lowered = info.lower()
    assert lowered.attention_mask is None and lowered.q_segment_ids is not None
    assert CASES["dense-3d"]().lower().attention_mask is not None


def random_mask(rng, b, h, sq, sk, density, hidden_row=False):
    m = rng.random((b, h, sq, sk)) < density
    if hidden_row:
        m[:, :, 1] = False
    return m


MASKS = [dict(density=0.3), dict(density=1.0), dict(density=0.0), dict(density=0.6, hidden_row=True)]


@pytest.mark.parametrize("opts", MASKS, ids=lambda o: f"d{o['density']}" + ("-row" if o.get("hidden_row") else ""))
@pytest.mark.parametrize("heads", [4, 1], ids=["per-head", "broadcast-heads"])
def test_gradients_through_a_dense_mask(rng, opts, heads):
    b, sq, sk, hq, hkv, d = 2, 19, 23, 4, 2, 32
    mask = random_mask(rng, b, heads, sq, sk, **opts)
    x = dict(q=rng.standard_normal((b, sq, hq, d)), k=rng.standard_normal((b, sk, hkv, d)),
             v=rng.standard_normal((b, sk, hkv, d)), bias=rng.standard_normal((b, 1, sq, sk)),
             softmax_aux=rng.standard_normal((hq, 2)))
    x32 = {n: jnp.asarray(a, jnp.float32) for n, a in x.items()}
    w = rng.standard_normal((b, sq, hq, d))
    info = MaskInfo.from_attention_mask(mask)
    names = tuple(x)

    def loss(*args):
        a = dict(zip(names, args))
        out = flash_attention(a["q"], a["k"], a["v"], a["bias"], None, None, a["softmax_aux"], mask_info=info,
                              causal=True)
        return jnp.sum(out * jnp.asarray(w, jnp.float32))
    out = flash_attention(x32["q"], x32["k"], x32["v"], x32["bias"], None, None, x32["softmax_aux"], mask_info=info,
                          causal=True)
    got = jax.jit(jax.grad(loss, argnums=tuple(range(len(names)))))(*(x32[n] for n in names))
    with jax.enable_x64(True):
        causal = ref.visible_mask(jnp, sq, sk, True)
        visible = jnp.asarray(mask) & causal[:, None]

        def ref_loss(*args):
            a = dict(zip(names, args))
            o, _ = ref.attention(jnp, a["q"], a["k"], a["v"], visible, a["bias"], a["softmax_aux"])
            return jnp.sum(o * jnp.asarray(w)), o
        x64 = [jnp.asarray(np.asarray(x32[n], np.float64)) for n in names]
        want, want_out = jax.grad(ref_loss, argnums=tuple(range(len(names))), has_aux=True)(*x64)
    assert_rel_l2(np.asarray(out, np.float64), np.asarray(want_out))
    for n, g, e in zip(names, got, want):
        assert g.shape == x32[n].shape, n
        assert np.all(np.isfinite(np.asarray(g))), n
        assert_rel_l2(np.asarray(g, np.float64), np.asarray(e))


def test_vmap_over_a_dense_mask(rng):
    mask = random_mask(rng, 3, 1, 9, 11, 0.5)
    q = jnp.asarray(rng.standard_normal((3, 2, 9, 2, 32)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((3, 2, 11, 2, 32)), jnp.float32) for _ in range(2))
    got = jax.vmap(lambda q, k, v, m: flash_attention(q, k, v, mask_info=MaskInfo.from_attention_mask(
        jnp.broadcast_to(m, (2,) + m.shape[1:]))))(q, k, v, jnp.asarray(mask)[:, None])
    for i in range(3):
        assert_close(got[i], masked_softmax(q[i], k[i], v[i], np.broadcast_to(mask[i][None], (2, 1, 9, 11))))
