"""ejk.jax.blocksparse_attention against JAX's float64 autodiff of blocksparse_reference.attention
(outputs and every gradient) on random block layouts at 10-50% density, shared and per head, with
causal + window, segment ids (mask_info), sinks as the seed normalizes them, soft cap, GQA and MQA
with head counts that are no multiple of 16, in float32 and bfloat16; fully masked query blocks;
under jit; the seed (XLA on the CPU) on identical inputs; arguments it cannot honour refused."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blocksparse_reference as ref
import seed_oracle
from ejk.jax import blocksparse_attention
from ejk.types import MaskInfo
from torch_support import assert_rel_l2, no_cpu_jit

pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def operands(rng, b, hq, hkv, sq, sk, d, sinks=None, dtype=jnp.float32):
    def randn(*shape, dt=dtype):
        return jnp.asarray(rng.standard_normal(shape), dt)
    x = dict(q=randn(b, hq, sq, d), k=randn(b, hkv, sk, d), v=randn(b, hkv, sk, d))
    if sinks is not None:
        x["softmax_aux"] = randn(*sinks, dt=jnp.float32)
    return x


def assert_grad_close(got, want, tol, name):
    """Relative L2 error of a gradient within tol (2e-2 for 16-bit: the brief's gradient bound)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert not np.isnan(got).any(), f"{name}: NaN"
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err <= tol, f"{name}: relative L2 error {err:.3g} > {tol}"


def random_layout(rng, b, heads, sq, sk, bq, bk, density):
    nq, nk = -(-sq // bq), -(-sk // bk)
    lay = rng.random((b, heads, nq, nk)) < density
    lay[0, 0, nq - 1] = False  # a fully masked query block
    return lay


def normalized_sinks(aux, hq, hkv):
    """The seed's _normalize_softmax_aux, for the reference."""
    if aux is None:
        return None
    if aux.ndim == 1:
        return aux[:, None] if aux.shape[0] == hq else (jnp.repeat(aux, hq // hkv)[:, None] if aux.shape[0] == hkv
                                                        else aux)
    return aux if aux.shape[0] == hq else jnp.repeat(aux, hq // hkv, axis=0)


def check(rng, x, layout, bq, bk, causal=True, window=None, seg=None, softcap=None, dtype_name="float32"):
    names = [n for n in ("q", "k", "v", "softmax_aux") if n in x]
    b, hq, sq, d = x["q"].shape
    hkv, sk = x["k"].shape[1], x["k"].shape[2]
    mask_info = None if seg is None else MaskInfo.from_segments(jnp.asarray(seg[0]), jnp.asarray(seg[1]))
    w = jnp.asarray(rng.standard_normal((b, hq, sq, d)), jnp.float32)

    def ours(*args):
        a = dict(zip(names, args))
        out = blocksparse_attention(a["q"], a["k"], a["v"], a.get("softmax_aux"), qkv_layouts=layout,
                                    chunk_size=(bq, bk), causal=causal, sliding_window=window,
                                    logits_soft_cap=softcap, mask_info=mask_info)
        return jnp.sum(out.astype(jnp.float32) * w), out

    (_, out), grads = jax.value_and_grad(ours, argnums=tuple(range(len(names))), has_aux=True)(*[x[n] for n in names])
    vis = ref.token_mask(layout, sq, sk, bq, bk, causal, None if window is None else
                         ((window, window) if isinstance(window, int) else window),
                         None if seg is None else seg[0], None if seg is None else seg[1])
    with jax.enable_x64(True):
        x64 = [jnp.asarray(np.asarray(x[n], np.float64)) for n in names]
        w64 = jnp.asarray(np.asarray(w, np.float64))

        def reference(*args):
            a = dict(zip(names, args))
            o, _ = ref.attention(jnp, a["q"], a["k"], a["v"], vis, normalized_sinks(a.get("softmax_aux"), hq, hkv),
                                 softcap=softcap)
            return jnp.sum(o * w64), o

        (_, want_out), want = jax.value_and_grad(reference, argnums=tuple(range(len(names))), has_aux=True)(*x64)
    assert_rel_l2(out, want_out, dtype_name)
    for name, g, gw in zip(names, grads, want):
        assert g.shape == x[name].shape, name
        assert_grad_close(g, gw, 1e-5 if dtype_name == "float32" else 2e-2, name)
    return out


@pytest.mark.parametrize("density", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("per_head", [False, True])
def test_random_layouts(rng, density, per_head):
    x = operands(rng, 2, 4, 2, 96, 128, 64)
    lay = random_layout(rng, 2, 4 if per_head else 1, 96, 128, 32, 32, density)
    check(rng, x, lay, 32, 32, causal=False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_causal_window_gqa_sinks_softcap(rng, dtype):
    # 12 query heads over 4 kv heads (no multiple of 16), sinks per kv head (the seed repeats them).
    x = operands(rng, 1, 12, 4, 160, 160, 64, sinks=(4,), dtype=jnp.dtype(dtype))
    lay = random_layout(rng, 1, 12, 160, 160, 64, 32, 0.4)
    check(rng, x, lay, 64, 32, causal=True, window=(40, 0), softcap=20.0, dtype_name=dtype)


def test_mqa_segments_shared_sinks(rng):
    x = operands(rng, 2, 6, 1, 80, 80, 32, sinks=(3,))  # 3 sinks shared by every head
    lay = random_layout(rng, 1, 1, 80, 80, 16, 16, 0.5)
    seg = np.zeros((2, 80), np.int32)
    seg[:, 37:] = 1
    seg[1, 70:] = -1
    check(rng, x, lay, 16, 16, causal=True, window=17, seg=(seg, seg))


def test_fully_masked_query_blocks_are_zero(rng):
    x = operands(rng, 1, 2, 2, 64, 64, 32)
    lay = np.ones((1, 1, 4, 4), bool)
    lay[0, 0, 1] = False
    out = check(rng, x, lay, 16, 16)
    assert np.all(np.asarray(out)[:, :, 16:32] == 0)


def test_under_jit(rng):
    x = operands(rng, 1, 2, 1, 64, 64, 32)
    lay = jnp.asarray(random_layout(rng, 1, 2, 64, 64, 16, 16, 0.3))
    f = jax.jit(lambda q, k, v, lay: blocksparse_attention(q, k, v, qkv_layouts=lay, chunk_size=16))
    eager = blocksparse_attention(x["q"], x["k"], x["v"], qkv_layouts=lay, chunk_size=16)
    np.testing.assert_array_equal(np.asarray(f(x["q"], x["k"], x["v"], lay)), np.asarray(eager))


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
@pytest.mark.parametrize("sinks", [None, 4, 2, 3])
def test_matches_the_seed(rng, sinks):
    """The seed's XLA code takes no block layout: the layout goes to it as the dense 4-D
    attention_mask it reads (head 0), ours as qkv_layouts; GQA, causal, a window, soft cap and
    sinks of the seed's three 1-D forms (4: per q head, 2: per kv head, 3: shared)."""
    b, hq, hkv, s, d = 1, 4, 2, 96, 32
    x = operands(rng, b, hq, hkv, s, s, d, sinks=None if sinks is None else (sinks,))
    lay = random_layout(rng, b, 1, s, s, 32, 32, 0.5)
    dense = ref.token_mask(lay, s, s, 32, 32)
    aux = x.get("softmax_aux")
    ours = blocksparse_attention(x["q"], x["k"], x["v"], aux, qkv_layouts=lay, chunk_size=32, causal=True,
                                 sliding_window=(30, 0), logits_soft_cap=25.0)
    args = [np.asarray(x[n]) for n in ("q", "k", "v")] + [None if aux is None else np.asarray(aux)]
    (seed,) = seed_oracle.run("blocksparse_attention", *args, attention_mask=dense, causal=True,
                              sliding_window=(30, 0), logits_soft_cap=25.0)
    assert_rel_l2(ours, seed)


def test_refused_arguments(rng):
    x = operands(rng, 1, 2, 2, 32, 32, 16)
    q, k, v = x["q"], x["k"], x["v"]
    for kwargs, name in [(dict(bias=jnp.zeros((1, 2, 32, 32))), "bias"),
                         (dict(mask_builder=lambda: None), "mask_builder"),
                         (dict(sequence_parallelism_mesh_axis_name="sp"), "sequence_parallelism_mesh_axis_name")]:
        with pytest.raises(NotImplementedError, match=name):
            blocksparse_attention(q, k, v, **kwargs)
    with pytest.raises(NotImplementedError, match="attention_mask"):
        blocksparse_attention(q, k, v, attention_mask=jnp.ones((1, 1, 32, 32), bool))
    with pytest.raises(ValueError, match="q_blocksize"):
        blocksparse_attention(q, k, v, chunk_size=24)


@pytest.mark.skipif(seed_oracle.python() is None, reason="no seed interpreter (EJK_SEED_PYTHON)")
def test_key_padding_mask_matches_the_seed(rng):
    """A 2-D attention_mask is a key padding mask (the seed's XLA code reads it so, though its type
    check admits 4-D masks only: the seed gets the same mask as [B, 1, Sq, Sk])."""
    x = operands(rng, 2, 4, 4, 64, 64, 32)
    keep = rng.random((2, 64)) < 0.7
    keep[1, :] = False  # a batch whose keys are all padding: every row 0
    ours = blocksparse_attention(x["q"], x["k"], x["v"], attention_mask=jnp.asarray(keep), causal=True)
    (seed,) = seed_oracle.run("blocksparse_attention", *[np.asarray(x[n]) for n in ("q", "k", "v")],
                              attention_mask=np.broadcast_to(keep[:, None, None, :], (2, 1, 64, 64)).copy(),
                              causal=True)
    assert_rel_l2(ours, seed)
    assert np.all(np.asarray(ours)[1] == 0)
