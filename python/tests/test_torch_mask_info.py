"""ejk.types.torch.MaskInfo: every constructor and composition of mask_cases.py against a dense
boolean reference written here with NumPy, and against the seed's MaskInfo and ejk's JAX one on
the same inputs (each run by its own interpreter, where installed: EJK_SEED_PYTHON, EJK_JAX_PYTHON);
a torch pytree; ejk.torch.flash_attention(mask_info=...) against the float64 reference and against
the same call with the dense mask as an explicit attention_mask, forward and gradients, eager and
under torch.compile (fullgraph: a structural mask lowers without reading a value on the host);
blocksparse_attention(mask_info=...) against the reference."""
import os
import pathlib
import subprocess

import numpy as np
import pytest

import flash_grad_reference as ref
import mask_cases
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64, poison

torch = import_torch()
import ejk.torch  # noqa: E402
import ejk.types.torch as torch_types  # noqa: E402
from ejk.types.torch import MaskInfo  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
CASES = mask_cases.cases(torch_types)
OWN_DRAW = {"random"}  # drawn by a torch.Generator, not jax.random: compared with its own reference
OTHERS = {"seed": (os.environ.get("EJK_SEED_PYTHON", "/work/venvs/seed/bin/python"), "ejkernel.types"),
          "jax": (os.environ.get("EJK_JAX_PYTHON", "/work/venvs/py/bin/python"), "ejk.types")}


@pytest.fixture(scope="module", params=sorted(OTHERS))
def other_results(request, tmp_path_factory):
    python, module = OTHERS[request.param]
    if not os.path.exists(python):
        pytest.skip(f"no interpreter for {module} at {python}")
    path = tmp_path_factory.mktemp(request.param) / "masks.npz"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(HERE.parent))  # ejk.types from this tree
    r = subprocess.run([python, str(HERE / "seed_masks.py"), str(path), module], cwd=HERE, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(np.load(path))


@pytest.mark.parametrize("name", sorted(set(CASES) - OWN_DRAW))
def test_same_as_the_seed_and_the_jax_mask_info(name, other_results):
    mask_cases.assert_same(name, mask_cases.results(CASES[name]()), other_results)


def dense_references():
    """name -> the dense mask [B, Q', K'] of each case of mask_cases.py, from the definitions."""
    seg, pad, dense3, tt = mask_cases._inputs()
    qi, kj = np.arange(mask_cases.Q)[:, None], np.arange(mask_cases.K)[None, :]

    def same(a, b=None):
        b = a if b is None else b
        return (a[:, :, None] == b[:, None, :]) & (a[:, :, None] >= 0) & (b[:, None, :] >= 0)

    def band(left, right, offset=0):
        return (kj >= qi + offset - left) & (kj <= qi + offset + right)

    valid = pad != 0
    padded = valid[:, :, None] & valid[:, None, :]
    segments, causal = same(seg), kj <= qi
    spans = np.array([[0, 9], [2, 12]])
    in_span = (np.arange(mask_cases.Q)[None] >= spans[:, :1]) & (np.arange(mask_cases.Q)[None] < spans[:, 1:])
    types = np.where(tt == 0, -1, tt)  # type 0 disabled (zero_policy "q")
    kv_lengths = segments & causal & (np.arange(mask_cases.K)[None, None] < np.array([7, 12])[:, None, None])
    return {
        "segments": segments,
        "segments-is-attn-mask": padded,
        "padding-2d": padded,
        "padding-2d-inverted": padded,
        "dense-3d": dense3,
        "dense-4d-segments": segments,
        "cu-seqlens": in_span[:, :, None] & in_span[:, None, :],
        "causal": segments & causal,
        "causal-offset": segments & (kj <= qi + 2),
        "causal-batch-offset": segments & (kj[None] <= qi[None] + np.array([0, 3])[:, None, None]),
        "window": segments & band(3, 3),
        "window-pair-causal": segments & band(4, 0),
        "window-offset": padded & band(2, 2, offset=1),
        "window-decode": (segments & band(3, 0))[:, 6:7, 3:7],   # row 6, keys 6 - 3 .. 6
        "window-prefill": (segments & band(4, 0))[:, :, 7:],     # the last 4 + 0 + 1 keys
        "chunked": segments & causal & (qi // 4 == kj // 4),
        "chunked-causal": padded & causal & (qi // 5 == kj // 5),
        "token-types-intersect": padded & same(types),
        "token-types-union": (segments & causal) | same(types),
        "token-types-replace": tt[:, :, None] == tt[:, None, :],
        "kv-lengths": np.stack([kv_lengths[0, 3:7], kv_lengths[1, 8:12]]),  # the 4 rows ending at 7 and 12
        "dynamic-init-padding": padded,
        "dynamic-init-ids": np.ones((mask_cases.B, mask_cases.Q, mask_cases.Q), bool),
        "materialized-segment-ids": dense3,
    }


REFERENCES = dense_references()


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_dense_mask_and_bias_against_the_reference(name):
    info = CASES[name]()
    mask = info.attention_mask
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
    np.testing.assert_array_equal(mask.numpy(), REFERENCES[name][:, None])
    bias = info.create_bias(torch.bfloat16)
    assert bias.dtype == torch.bfloat16
    np.testing.assert_array_equal(bias.float().numpy() == 0, REFERENCES[name][:, None])
    assert (bias.float().numpy()[~REFERENCES[name][:, None]] == torch.finfo(torch.bfloat16).min).all()
    assert info.to_dtype(np.float32).attention_mask.dtype == torch.float32


def test_dense_constructors_per_head_and_inverted(rng):
    dense = rng.random((2, 3, 5, 7)) > 0.5
    np.testing.assert_array_equal(MaskInfo.from_attention_mask(torch.from_numpy(dense)).attention_mask.numpy(), dense)
    inverted = MaskInfo.from_attention_mask(torch.from_numpy(dense[:, 0]), mask_is_valid=False)
    np.testing.assert_array_equal(inverted.attention_mask.numpy(), ~dense[:, :1])
    with pytest.raises(ValueError, match=r"^attention_mask: expected \[B, S\], \[B, Q, K\] or \[B, H, Q, K\]"):
        MaskInfo.from_attention_mask(torch.zeros(2, 2, 2, 2, 2, dtype=torch.bool))


def test_random_is_its_seeds_draw():
    a, b = MaskInfo.from_random(2, 16, 24, sparsity=0.3, seed=5), MaskInfo.from_random(2, 16, 24, sparsity=0.3, seed=5)
    assert torch.equal(a.attention_mask, b.attention_mask) and a.attention_mask.shape == (2, 1, 16, 24)
    assert not torch.equal(a.attention_mask, MaskInfo.from_random(2, 16, 24, sparsity=0.3, seed=6).attention_mask)
    masked = 1.0 - a.attention_mask.float().mean().item()
    assert 0.2 < masked < 0.4, masked


def test_helpers_and_pytree():
    seg = torch.from_numpy(mask_cases._inputs()[0])
    mask = torch_types.segment_ids_to_mask(seg)
    q_ids, kv_ids = torch_types.mask_to_segment_ids(mask)
    assert torch.equal(torch_types.segment_ids_to_mask((q_ids, kv_ids)), mask)
    info = MaskInfo.from_segments(seg).apply_causal()
    leaves, spec = torch.utils._pytree.tree_flatten(info)
    assert leaves and all(isinstance(x, torch.Tensor) for x in leaves)
    again = torch.utils._pytree.tree_unflatten(leaves, spec)
    assert isinstance(again, MaskInfo) and torch.equal(again.attention_mask, info.attention_mask)


def test_visualize_classifies_blocks_of_the_dense_mask():
    info = MaskInfo.from_segments(torch.tensor([[0] * 10 + [1] * 6], dtype=torch.int32)).apply_causal()
    rows = info.visualize(block_size=4, charset="ascii", return_str=True).splitlines()[1:]
    assert [r[:5] for r in rows] == ["   0 ", "   0 ", " MIX ", "   1 "]
    dense = info.attention_mask.numpy()[0, 0]
    for r, row in enumerate(rows):
        for c in range(4):
            block = dense[4 * r:4 * r + 4, 4 * c:4 * c + 4]
            assert row[5 + 2 * c:7 + 2 * c] == ("##" if block.all() else ".." if block.any() else "  "), (r, c)


# --- ops with mask_info= -------------------------------------------------------------------------

LOWERED = ["segments", "segments-is-attn-mask", "padding-2d", "dense-4d-segments", "cu-seqlens", "causal",
           "causal-offset", "window", "window-pair-causal", "window-offset", "chunked", "chunked-causal",
           "token-types-intersect", "token-types-replace"]
DENSE = ["dense-3d", "causal-batch-offset", "token-types-union", "materialized-segment-ids", "random"]
needs_jit = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def _inputs(rng, dtype, d=32):
    shape = (mask_cases.B, mask_cases.Q, 2, d)
    x = {n: torch.from_numpy(rng.standard_normal(shape)).to(dtype).requires_grad_() for n in ("q", "k", "v")}
    return x, torch.from_numpy(rng.standard_normal(shape)).float()


def _rows(info):
    """[B, Q, 1, 1]: the query rows the seed keeps (its visible query id is not -1)."""
    ids = info.q_segment_ids
    return torch.ones((), dtype=torch.bool) if ids is None else (ids >= 0)[:, :, None, None]


def _reference(x, w, info):
    """float64 out (rows whose visible query id is -1 at 0, the seed's) and its gradients."""
    x64 = {n: t.detach().double().requires_grad_() for n, t in x.items()}
    out, _ = ref.attention(torch, x64["q"], x64["k"], x64["v"], info.attention_mask)
    out = out * _rows(info)
    (out * w.double()).sum().backward()
    return out.detach(), {n: t.grad for n, t in x64.items()}


def _run(fn, x, w):
    poison(torch, "cpu", (mask_cases.B, mask_cases.Q, 2, 32), (mask_cases.B, 2, mask_cases.Q))
    out = fn(x["q"], x["k"], x["v"])
    (out.float() * w).sum().backward()
    grads = {n: t.grad.clone() for n, t in x.items()}
    for t in x.values():
        t.grad = None
    return out.detach(), grads


def _assert_matches_reference(rng, fn, info):
    """fn(q, k, v)'s output and gradients (float32) against the float64 reference of info's mask;
    returns the inputs."""
    x, w = _inputs(rng, torch.float32)
    out, grads = _run(fn, x, w)
    want, want_grads = _reference(x, w, info)
    assert_rel_l2(out, numpy64(want))
    for n in x:
        assert_rel_l2(grads[n], numpy64(want_grads[n]))
    return x


@needs_jit
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", LOWERED + DENSE)
def test_flash_attention_with_mask_info(rng, name, dtype):
    info = CASES[name]()
    x, w = _inputs(rng, dtype)
    out, grads = _run(lambda q, k, v: ejk.torch.flash_attention(q, k, v, mask_info=info), x, w)
    want, want_grads = _reference(x, w, info)
    dtype_name = str(dtype).removeprefix("torch.")
    assert_rel_l2(out, numpy64(want), dtype_name)
    for n in x:
        assert_rel_l2(grads[n], numpy64(want_grads[n]), "float32" if dtype == torch.float32 else "bfloat16")

    # The same call with the dense mask given to the kernel directly (rows at -1 zeroed likewise).
    mask = info.attention_mask.to(torch.uint8)
    rows = _rows(info)
    explicit = (lambda q, k, v: torch.ops.ejk.flash_attention(q, k, v, None, None, None, None, None, None,
                                                              mask)[0] * rows)
    out2, grads2 = _run(explicit, x, w)
    assert_rel_l2(out, numpy64(out2), dtype_name)
    for n in x:
        assert_rel_l2(grads[n], numpy64(grads2[n]), "float32" if dtype == torch.float32 else "bfloat16")


@needs_jit
@pytest.mark.parametrize("name", ["causal", "chunked-causal", "window-pair-causal", "cu-seqlens", "dense-3d"])
def test_flash_attention_with_mask_info_compiled(rng, name):
    """fullgraph: lowering a structural mask reads no value on the host (no graph break); a dense
    term stays dense under tracing."""
    info = CASES[name]()
    compiled = torch.compile(lambda q, k, v, i: ejk.torch.flash_attention(q, k, v, mask_info=i), fullgraph=True)
    _assert_matches_reference(rng, lambda q, k, v: compiled(q, k, v, info), info)


@needs_jit
def test_mask_info_built_inside_a_compiled_function(rng):
    seg = torch.from_numpy(mask_cases._inputs()[0])
    compiled = torch.compile(lambda q, k, v, ids: ejk.torch.flash_attention(
        q, k, v, mask_info=MaskInfo.from_segments(ids).apply_sliding_window((3, 0))), fullgraph=True)
    _assert_matches_reference(rng, lambda q, k, v: compiled(q, k, v, seg),
                              MaskInfo.from_segments(seg).apply_sliding_window((3, 0)))


@needs_jit
@pytest.mark.parametrize("name", ["segments", "causal", "window-pair-causal"])
def test_blocksparse_attention_with_mask_info(rng, name):
    info = CASES[name]()
    heads_first = (lambda t: t.transpose(1, 2))  # blocksparse_attention's [B, H, S, D]
    _assert_matches_reference(rng, lambda q, k, v: heads_first(ejk.torch.blocksparse_attention(
        heads_first(q), heads_first(k), heads_first(v), mask_info=info, causal=False)), info)


@needs_jit
def test_ring_attention_without_a_group_takes_the_segment_ids(rng):
    info = CASES["segments"]()
    x = _assert_matches_reference(rng, lambda q, k, v: ejk.torch.ring_attention(q, k, v, mask_info=info), info)
    for beyond in ("causal", "dense-3d"):  # a band or a dense term: no per-shard form
        with pytest.raises(NotImplementedError, match=r"^mask_info: only segment ids in ring_attention"):
            ejk.torch.ring_attention(x["q"], x["k"], x["v"], mask_info=CASES[beyond]())


def test_refusals_name_the_argument():
    q = torch.zeros(mask_cases.B, mask_cases.Q, 2, 32)
    with pytest.raises(TypeError, match=r"^mask_info: expected an ejk.types.MaskInfo \(or ejk.types.torch.MaskInfo\)"):
        ejk.torch.flash_attention(q, q, q, mask_info=torch.ones(2, 12, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match=r"^mask_info: a dense term"):
        ejk.torch.blocksparse_attention(*(q.transpose(1, 2),) * 3, mask_info=CASES["dense-3d"](), causal=False)
    with pytest.raises(NotImplementedError, match=r"^mask_info: keys at k - q in \[-inf, -1\]"):
        ejk.torch.flash_attention(q, q, q, mask_info=CASES["segments"]().apply_causal(-1))


# --- mask_info with packed varlen ----------------------------------------------------------------

LENGTHS_Q, LENGTHS_K = [5, 0, 7, 4], [6, 3, 7, 5]  # an empty query sequence; key packing differs


def _packed(rng, lengths_q, lengths_k, three_d):
    cu_q, cu_k = (torch.tensor(np.r_[0, np.cumsum(n)], dtype=torch.int32) for n in (lengths_q, lengths_k))
    tq, tk = sum(lengths_q), sum(lengths_k)
    lead = () if three_d else (1,)
    x = {n: torch.from_numpy(rng.standard_normal(lead + (t, h, 32))).float().requires_grad_()
         for n, t, h in (("q", tq, 4), ("k", tk, 2), ("v", tk, 2))}
    return x, cu_q, cu_k, torch.from_numpy(rng.standard_normal(lead + (tq, 4, 32))).float()


def _varlen_reference(x, w, cu_q, cu_k, info, causal=False, window=None):
    """float64 out, lse and gradients: the packed batch of 1 under the MaskInfo's dense mask and
    the varlen structure (own sequence's keys, causal / window within the sequence)."""
    x64 = {n: (t if t.ndim == 4 else t[None]).detach().double().requires_grad_() for n, t in x.items()}
    tq, tk = x64["q"].shape[1], x64["k"].shape[1]
    visible = ref.visible_mask(torch, tq, tk, causal=causal, window=window, cum_q=cu_q.numpy(), cum_k=cu_k.numpy())
    out, lse = ref.attention(torch, x64["q"], x64["k"], x64["v"], info.attention_mask & visible[:, None])
    out = out * _rows(info)
    (out * (w if w.ndim == 4 else w[None]).double()).sum().backward()
    shape = x["q"].shape
    return out.detach().reshape(shape), lse.detach(), {n: t.grad.reshape(x[n].shape) for n, t in x64.items()}


VARLEN = {
    "dense": dict(mask=lambda tq, tk, rng: MaskInfo.from_attention_mask(torch.from_numpy(rng.random((1, tq, tk)) > 0.3))),
    "dense-causal": dict(mask=lambda tq, tk, rng: MaskInfo.from_attention_mask(
        torch.from_numpy(rng.random((1, tq, tk)) > 0.3)), causal=True),
    "segments-window": dict(mask=lambda tq, tk, rng: MaskInfo.from_segments(
        torch.from_numpy(rng.integers(-1, 2, (1, tq)).astype(np.int32)),
        torch.from_numpy(rng.integers(-1, 2, (1, tk)).astype(np.int32))), window=(3, 1)),
    "packed-causal-offset": dict(mask=lambda tq, tk, rng: MaskInfo.from_segments(
        torch.zeros(1, tq, dtype=torch.int32), torch.zeros(1, tk, dtype=torch.int32)).apply_causal(2), causal=True),
}


@needs_jit
@pytest.mark.parametrize("three_d", [True, False], ids=["3d", "4d"])
@pytest.mark.parametrize("name", sorted(VARLEN))
def test_flash_attention_varlen_with_mask_info(rng, name, three_d):
    case = VARLEN[name]
    x, cu_q, cu_k, w = _packed(rng, LENGTHS_Q, LENGTHS_K, three_d)
    info = case["mask"](cu_q[-1].item(), cu_k[-1].item(), rng)
    opts = dict(causal=case.get("causal", False), sliding_window=case.get("window"))
    poison(torch, "cpu", (cu_q[-1].item(), 4, 32), (1, 4, cu_q[-1].item()))
    out, lse = ejk.torch.flash_attention_with_lse(x["q"], x["k"], x["v"], None, cu_q, cu_k, mask_info=info, **opts)
    assert out.shape == x["q"].shape and lse.shape == (1, 4, cu_q[-1].item())
    (out * w).sum().backward()
    want, want_lse, want_grads = _varlen_reference(x, w, cu_q, cu_k, info, opts["causal"], opts["sliding_window"])
    assert_rel_l2(out, numpy64(want))
    assert_rel_l2(lse, numpy64(want_lse))
    for n in x:
        assert_rel_l2(x[n].grad, numpy64(want_grads[n]))


@needs_jit
def test_flash_attention_varlen_one_packing_keeps_the_band(rng):
    """The same cum_seqlens for queries and keys: causal and the window stay the kernel's band
    (positions within a sequence are positions over the packing less one offset)."""
    x, cu, _, w = _packed(rng, LENGTHS_K, LENGTHS_K, True)
    info = MaskInfo.from_attention_mask(torch.from_numpy(rng.random((1, 21, 21)) > 0.2))
    out = ejk.torch.flash_attention(x["q"], x["k"], x["v"], None, cu, cu, mask_info=info, causal=True,
                                    sliding_window=(4, 0))
    (out * w).sum().backward()
    want, _, want_grads = _varlen_reference(x, w, cu, cu, info, True, (4, 0))
    assert_rel_l2(out, numpy64(want))
    for n in x:
        assert_rel_l2(x[n].grad, numpy64(want_grads[n]))


@needs_jit
def test_flash_attention_varlen_with_mask_info_compiled(rng):
    x, cu_q, cu_k, w = _packed(rng, LENGTHS_Q, LENGTHS_K, True)
    info = VARLEN["segments-window"]["mask"](16, 21, rng).apply_causal(3)
    compiled = torch.compile(lambda q, k, v, a, b, i: ejk.torch.flash_attention(
        q, k, v, None, a, b, mask_info=i, sliding_window=(3, 1)), fullgraph=True)
    out = compiled(x["q"], x["k"], x["v"], cu_q, cu_k, info)
    (out * w).sum().backward()
    want, _, want_grads = _varlen_reference(x, w, cu_q, cu_k, info, window=(3, 1))
    assert_rel_l2(out, numpy64(want))
    for n in x:
        assert_rel_l2(x[n].grad, numpy64(want_grads[n]))


def test_varlen_with_mask_info_refusals():
    q, cu = torch.zeros(10, 2, 32), torch.tensor([0, 4, 10], dtype=torch.int32)
    info = MaskInfo.from_segments(torch.zeros(1, 10, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^mask_info: with packed varlen, expected a MaskInfo over the packed tokens, "
                                         r"of shape \(1, 10, 10\)"):
        ejk.torch.flash_attention(q, q, q, None, cu, cu, mask_info=MaskInfo.from_segments(torch.zeros(2, 5)))
    with pytest.raises(ValueError, match=r"^bias: not supported with cum_seqlens_q"):
        ejk.torch.flash_attention(q, q, q, torch.zeros(1, 1, 10, 10), cu, cu, mask_info=info)
    with pytest.raises(NotImplementedError, match=r"^dropout_prob: not with mask_info and packed varlen"):
        ejk.torch.flash_attention(q, q, q, None, cu, cu, mask_info=info, dropout_prob=0.1)
    with pytest.raises(ValueError, match=r"^cum_seqlens_k: expected int32 \[N \+ 1\]"):
        ejk.torch.flash_attention(q, q, q, None, cu, cu.long(), mask_info=info)
