"""ejk.types.MaskInfo: every constructor and composition of mask_cases.py against a dense
boolean reference written here and against the seed's MaskInfo on the same inputs (where the
seed is installed: EJK_SEED_PYTHON, or /work/venvs/seed); it is a pytree; flash_attention with
mask_info= equals the call with the dense mask as a bias (test_flash_dense_mask.py: what only a
dense mask says)."""
import os
import pathlib
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejk.types
import mask_cases
import reference
from conftest import assert_close
from ejk.jax import flash_attention
from ejk.types import MaskInfo

HERE = pathlib.Path(__file__).resolve().parent
SEED_PYTHON = os.environ.get("EJK_SEED_PYTHON", "/work/venvs/seed/bin/python")
CASES = mask_cases.cases(ejk.types)


@pytest.fixture(scope="module")
def seed_results(tmp_path_factory):
    if not os.path.exists(SEED_PYTHON):
        pytest.skip(f"no seed interpreter at {SEED_PYTHON} (EJK_SEED_PYTHON)")
    path = tmp_path_factory.mktemp("seed") / "seed.npz"
    r = subprocess.run([SEED_PYTHON, str(HERE / "seed_masks.py"), str(path)], cwd=HERE, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(np.load(path))


@pytest.mark.parametrize("name", CASES)
def test_same_as_the_seed(name, seed_results):
    mask_cases.assert_same(name, mask_cases.results(CASES[name]()), seed_results)


def dense_reference(seg, band=(None, None), chunk=None, kv_len=None):
    """[B, 1, Q, K] from segment ids, a band of k - q offsets and a chunk size, by loops."""
    b, q_len = seg.shape
    k_len = kv_len or q_len
    out = np.zeros((b, 1, q_len, k_len), bool)
    for n in range(b):
        for i in range(q_len):
            for j in range(k_len):
                ok = seg[n, i] >= 0 and seg[n, j] >= 0 and seg[n, i] == seg[n, j]
                ok &= band[0] is None or j - i >= -band[0]
                ok &= band[1] is None or j - i <= band[1]
                ok &= chunk is None or i // chunk == j // chunk
                out[n, 0, i, j] = ok
    return out


def test_dense_reference():
    seg, _, _, _ = mask_cases._inputs()
    m = lambda: MaskInfo.from_segments(seg)
    np.testing.assert_array_equal(m().attention_mask, dense_reference(seg))
    np.testing.assert_array_equal(m().apply_causal(2).attention_mask, dense_reference(seg, (None, 2)))
    np.testing.assert_array_equal(m().apply_sliding_window((3, 1)).apply_causal().attention_mask,
                                  dense_reference(seg, (3, 0)))
    np.testing.assert_array_equal(m().apply_sliding_window(2, offset=1).attention_mask, dense_reference(seg, (1, 3)))
    np.testing.assert_array_equal(m().apply_chunked(4).attention_mask, dense_reference(seg, (None, 0), chunk=4))
    bias = m().create_bias(jnp.bfloat16)
    assert bias.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(bias) == 0, dense_reference(seg))


def test_helpers():
    seg, _, _, _ = mask_cases._inputs()
    mask = ejk.types.segment_ids_to_mask(jnp.asarray(seg))
    q_ids, kv_ids = ejk.types.mask_to_segment_ids(mask)
    np.testing.assert_array_equal(ejk.types.segment_ids_to_mask((q_ids, kv_ids)), mask)


def test_a_pytree_under_jit_and_vmap():
    seg, _, _, _ = mask_cases._inputs()
    info = MaskInfo.from_segments(seg).apply_causal()
    leaves, tree = jax.tree_util.tree_flatten(info)
    assert all(isinstance(x, jax.Array) for x in leaves)
    again = jax.tree_util.tree_unflatten(tree, leaves)
    np.testing.assert_array_equal(again.attention_mask, info.attention_mask)
    np.testing.assert_array_equal(jax.jit(lambda i: i.attention_mask)(info), info.attention_mask)


def test_get_shardings():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("dp",))
    info = MaskInfo.from_segments(np.zeros((2, 8), np.int32), batch_axis_name="dp", qheads_axis_name=None,
                                  kvheads_axis_name=None, sequence_axis_name=None)
    shardings = info.get_shardings(mesh=mesh)
    assert shardings.q_segment_ids == jax.sharding.PartitionSpec("dp", None)
    assert shardings.attention_mask is None
    with pytest.raises(ValueError, match=r"^qheads_axis_name: mesh axis 'tp' is not in the mesh"):
        MaskInfo.from_segments(np.zeros((2, 8), np.int32)).get_shardings(
            mesh=jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",)))


LOWERED = ["segments", "segments-is-attn-mask", "padding-2d", "padding-2d-inverted", "dense-4d-segments",
           "cu-seqlens", "causal", "causal-offset", "window", "window-pair-causal", "window-offset", "chunked",
           "chunked-causal", "token-types-intersect", "token-types-replace"]


@pytest.mark.parametrize("name", LOWERED)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_flash_attention_with_mask_info(rng, name, jit):
    """mask_info= is the dense mask's semantics, with rows whose segment id is -1 at 0 (the seed's)."""
    info = CASES[name]()
    q, k, v = (jnp.asarray(rng.standard_normal((mask_cases.B, mask_cases.Q, 2, 64)), jnp.float32) for _ in range(3))
    call = (lambda q, k, v, i: flash_attention(q, k, v, mask_info=i))
    out = (jax.jit(call) if jit else call)(q, k, v, info)
    mask = np.asarray(info.attention_mask)
    want = reference.flash_attention(q, k, v, bias=np.where(mask, 0.0, -np.inf))[0]
    want = np.where(np.asarray(info.q_segment_ids)[:, :, None, None] >= 0, np.nan_to_num(want), 0.0)
    assert_close(out, want)


def test_a_band_without_the_diagonal_is_refused(rng):
    seg, _, _, _ = mask_cases._inputs()
    q = jnp.asarray(rng.standard_normal((mask_cases.B, mask_cases.Q, 2, 64)), jnp.float32)
    with pytest.raises(NotImplementedError, match=r"^mask_info: keys at k - q in \[-inf, -1\]"):
        flash_attention(q, q, q, mask_info=MaskInfo.from_segments(seg).apply_causal(-1))


def test_views_under_jit():
    seg = jnp.asarray([[0, 0, 1, 1, 1, -1], [0, 0, 0, 0, -1, -1]], jnp.int32)
    cu = jax.jit(lambda ids: MaskInfo.from_segments(ids).get_or_compute_qkv_cu_seqlens(max_segments=3))(seg)
    np.testing.assert_array_equal(np.asarray(cu[0]), [0, 6, 9, 9])
    np.testing.assert_array_equal(np.asarray(MaskInfo.from_segments(seg).q_lens), [6, 3])
    with pytest.raises(ValueError, match="q_lens: its length is the number of segments"):
        jax.jit(lambda ids: MaskInfo.from_segments(ids).q_lens)(seg)
    info = jax.jit(lambda ids: MaskInfo.from_segments(ids).to_dtype(jnp.float32))(seg)
    assert info.attention_mask.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(info.attention_mask), np.asarray(MaskInfo.from_segments(seg).attention_mask))


def test_visualize_classifies_blocks_of_the_dense_mask():
    info = MaskInfo.from_segments(jnp.asarray([[0] * 10 + [1] * 6], jnp.int32)).apply_causal()
    text = info.visualize(block_size=4, charset="ascii", return_str=True)
    rows = text.splitlines()[1:]
    assert [r[:5] for r in rows] == ["   0 ", "   0 ", " MIX ", "   1 "]
    dense = np.asarray(info.attention_mask)[0, 0]
    for r, row in enumerate(rows):
        for c in range(4):
            block = dense[4 * r:4 * r + 4, 4 * c:4 * c + 4]
            want = "##" if block.all() else ".." if block.any() else "  "
            assert row[5 + 2 * c:7 + 2 * c] == want, (r, c)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_varlen_with_mask_info_under_jit(rng, causal):
    """A MaskInfo over the packed tokens with cum_seqlens (two packings): the float64 reference's
    output, and the gradients of the dense call given the whole mask (test_torch_mask_info.py
    compares gradients with the float64 reference)."""
    import flash_grad_reference as ref
    lengths_q, lengths_k = [5, 0, 7, 4], [6, 3, 7, 5]
    cu_q, cu_k = (np.r_[0, np.cumsum(n)].astype(np.int32) for n in (lengths_q, lengths_k))
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    dense = rng.random((1, tq, tk)) > 0.3
    q, k, v = (rng.standard_normal((t, h, 32)).astype(np.float32) for t, h in ((tq, 4), (tk, 2), (tk, 2)))
    call = jax.jit(lambda q, k, v, a, b, i: flash_attention(q, k, v, None, a, b, mask_info=i, causal=causal))
    info = MaskInfo.from_attention_mask(dense)
    out = call(q, k, v, jnp.asarray(cu_q), jnp.asarray(cu_k), info)
    visible = ref.visible_mask(np, tq, tk, causal=causal, cum_q=cu_q, cum_k=cu_k) & dense
    want, _ = ref.attention(np, *(x[None].astype(np.float64) for x in (q, k, v)), visible)
    assert_close(out, want[0])

    loss = (lambda f: lambda q, k, v: jnp.sum(f(q, k, v) * jnp.arange(tq, dtype=jnp.float32)[:, None, None]))
    grads = jax.grad(loss(lambda q, k, v: call(q, k, v, jnp.asarray(cu_q), jnp.asarray(cu_k), info)), (0, 1, 2))(q, k, v)
    whole = MaskInfo.from_attention_mask(visible)
    dense_call = (lambda q, k, v: flash_attention(q[None], k[None], v[None], mask_info=whole)[0])
    for got, exp in zip(grads, jax.grad(loss(dense_call), (0, 1, 2))(q, k, v)):
        assert_close(got, exp)
