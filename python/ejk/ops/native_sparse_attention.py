"""native_sparse_attention, with ``ejkernel.modules.native_sparse_attention``'s signature
(0.0.80.3): the compression branch (mean-pooled complete blocks) and the seed's top-k block
selection are framework code (differentiable where the seed's are: compression yes, top-k no),
the selection attention is ejkernel (C++)'s nsa_selection_attention with its backward as the
custom gradient, and the gates are a framework sum. Unlike the seed, a block selected twice is
attended once, and varlen ``cu_seqlens`` is supported (docs/design/native_sparse_attention.md)."""
import math

from .. import _kit

_BLOCK = 64  # the seed's block_size (its module passes the kernel default)


class _Xp:
    """The few array operations the composition needs, spelled for jax.numpy or torch."""

    def __init__(self, fw):
        self.jax = fw.name == "jax"
        if self.jax:
            import jax
            import jax.numpy as jnp
            self.np, self.lax = jnp, jax.lax
        else:
            import torch
            self.np = torch

    def arange(self, n, like):
        return self.np.arange(n) if self.jax else self.np.arange(n, device=like.device)

    def repeat(self, x, n, axis):
        return self.np.repeat(x, n, axis=axis) if self.jax else x.repeat_interleave(n, dim=axis)

    def mean(self, x, axis):
        return x.mean(axis=axis) if self.jax else x.mean(dim=axis)

    def sum(self, x, axis):
        return x.sum(axis=axis) if self.jax else x.sum(dim=axis)

    def logsumexp(self, x, axis):
        if self.jax:
            from jax.scipy.special import logsumexp
            return logsumexp(x, axis=axis)
        return self.np.logsumexp(x, dim=axis)

    def full_like(self, x, value):
        return self.np.full_like(x, value)

    def f32(self, x):
        return x.astype(self.np.float32) if self.jax else x.float()

    def i32(self, x):
        return x.astype(self.np.int32) if self.jax else x.to(self.np.int32)

    def like(self, x, ref):
        return x.astype(ref.dtype) if self.jax else x.to(ref.dtype)

    def top_indices(self, scores, k):
        """The k largest along the last axis, ties to the lower index (lax.top_k's rule)."""
        if self.jax:
            return self.lax.top_k(scores, k)[1]
        return self.np.sort(scores, dim=-1, descending=True, stable=True)[1][..., :k]

    def concat(self, xs, axis):
        return self.np.concatenate(xs, axis=axis) if self.jax else self.np.cat(xs, dim=axis)


def _compressed(xp, q, k, v, scale):
    """The compression branch in float32: mean-pooled complete blocks, attention over those a
    query has completed (c < (t + 1) // 64). Returns o_cmp (0 without a complete block), lse
    (0 there, as the seed's) and the logits against every complete block."""
    b, t, hq, d = q.shape
    hkv, nc = k.shape[2], t // _BLOCK
    if nc == 0:  # no complete block: no token sees one
        zero = xp.full_like(xp.f32(q), 0.0)
        return zero, zero[..., 0], zero[..., :0]
    k_cmp = xp.mean(xp.f32(k[:, :nc * _BLOCK]).reshape(b, nc, _BLOCK, hkv, d), 2)
    v_cmp = xp.mean(xp.f32(v[:, :nc * _BLOCK]).reshape(b, nc, _BLOCK, hkv, d), 2)
    group = hq // hkv
    scores = xp.np.einsum("bthd,bchd->bthc", xp.f32(q), xp.repeat(k_cmp, group, 2)) * scale
    done = (xp.arange(t, q) + 1) // _BLOCK
    seen = (xp.arange(nc, q)[None, :] < done[:, None])[None, :, None, :]
    masked = xp.np.where(seen, scores, -math.inf)
    has = (done > 0)[None, :, None]
    lse = xp.np.where(has, xp.logsumexp(masked, -1), 0.0)
    p = xp.np.where(seen, xp.np.exp(masked - lse[..., None]), 0.0)
    o = xp.np.einsum("bthc,bchd->bthd", p, xp.repeat(v_cmp, group, 2))
    return xp.np.where(has[..., None], o, 0.0), lse, scores


def _select(xp, scores, lse, hkv, t, count):
    """The seed's top-k: exp(s - lse) over earlier blocks, the query's own block 1, summed over
    the kv group, future blocks -inf, + c * 1e-8, then the top `count` (no index twice), those
    past the own block -1. int32 [B, T, Hkv, S]."""
    b, _, hq, nc = scores.shape
    nb = -(-t // _BLOCK)
    own = xp.arange(t, scores) // _BLOCK
    c = xp.arange(nb, scores)
    # Complete blocks' probabilities; the own block (complete or not) is 1; later ones -inf.
    p = xp.np.exp(scores - lse[..., None])
    if nb > nc:  # a trailing partial block: only its own tokens see it, as their own
        pad = xp.full_like(lse[..., None], 0.0)
        p = xp.concat([p] + [pad] * (nb - nc), -1)
    earlier = (c[None, :] < own[:, None])[None, :, None, :]
    mine = (c[None, :] == own[:, None])[None, :, None, :]
    p = xp.np.where(mine, 1.0, xp.np.where(earlier, p, 0.0))
    p_sum = xp.sum(p.reshape(b, t, hkv, hq // hkv, nb), 3)
    p_sum = xp.np.where((c[None, :] > own[:, None])[None, :, None, :], -math.inf, p_sum)
    p_sum = p_sum + xp.f32(c) * 1e-8
    k = min(int(count), nb)
    idx = xp.top_indices(p_sum, k)
    return xp.i32(xp.np.where(idx <= own[None, :, None, None], idx, -1))


def _per_token(xp, x, t, hkv, name):
    """block_indices or block_counts in the seed's per-token layout [B, T, Hkv, ...], also from
    its per-query-block one [B, Hkv, NB, ...]."""
    nb = -(-t // _BLOCK)
    if x.shape[1] == t and x.shape[2] == hkv:
        return x
    if x.shape[1] == hkv and x.shape[2] == nb:
        x = x.permute(0, 2, 1, *range(3, x.ndim)) if not xp.jax else xp.np.moveaxis(x, 1, 2)
        return x[:, xp.arange(t, x) // _BLOCK]
    raise ValueError(f"{name}: expected [batch, seq_len, num_kv_heads, ...] = [.., {t}, {hkv}, ..] or [batch, "
                     f"num_kv_heads, num_blocks, ...] = [.., {hkv}, {nb}, ..], got {tuple(x.shape)}")


def _dense(fw, xp, q, k, v, g_cmp, g_slc, block_indices, block_counts, scale, cfg):
    t, hkv = q.shape[1], k.shape[2]
    o_cmp = None
    counts = None if isinstance(block_counts, int) else xp.i32(_per_token(xp, block_counts, t, hkv, "block_counts"))
    if g_cmp is not None:
        o_cmp, lse, scores = _compressed(xp, q, k, v, scale)
        top = block_counts if isinstance(block_counts, int) else int(block_counts.reshape(-1)[0])
        block_indices = _select(xp, scores, lse, hkv, t, top)
    if block_indices is None:
        raise ValueError("block_indices: required when g_cmp is not given (either g_cmp or block_indices)")
    idx = xp.i32(_per_token(xp, block_indices, t, hkv, "block_indices"))
    if counts is None and block_counts < idx.shape[-1]:
        counts = xp.i32(xp.full_like(idx[..., 0], max(int(block_counts), 0)))
    o = fw.call("nsa_selection_attention", cfg=cfg, q=q, k=k, v=v, block_indices=idx, block_counts=counts,
                softmax_scale=scale, block_size=_BLOCK)["out"]
    if g_slc is not None:
        o = o * g_slc[..., None]
    if o_cmp is not None:
        o = o + xp.like(o_cmp, q) * g_cmp[..., None]
    return o


def _bounds(cu_seqlens, total):
    """cu_seqlens as host integers (its values size the pieces), checked."""
    import numpy as np
    try:
        cu = np.asarray(cu_seqlens.cpu() if hasattr(cu_seqlens, "cpu") else cu_seqlens).astype(np.int64).ravel()
    except Exception as e:  # a JAX tracer: the values are not known
        raise ValueError("cu_seqlens: its values must be known (a concrete array, not traced under jit): the "
                         "sequences' lengths size the compression blocks") from e
    if cu.size < 1 or cu[0] != 0 or cu[-1] != total or np.any(np.diff(cu) < 0):
        raise ValueError(f"cu_seqlens: expected non-decreasing offsets from 0 to {total}, got {cu.tolist()}")
    return cu.tolist()


def native_sparse_attention(fw, query, key, value, g_cmp=None, g_slc=None, block_indices=None, block_counts=16,
                            cu_seqlens=None, /, *, softmax_scale=None, platform=None, cfg=None):
    """Native sparse attention (compression, top-k selection, selection attention, gates), as
    ``ejkernel.modules.native_sparse_attention``{on}; differentiable.

    Args:
      query: [B, T, Hq, D]; key, value: [B, T, Hkv, D] (BTHD), Hq a multiple of Hkv; float32,
        bfloat16 or float16, all three alike. Blocks are 64 tokens, as the seed's.
      g_cmp: [B, T, Hq] gate of the compression branch. Given: the compression branch runs
        (attention over the mean-pooled complete blocks, in float32; a token before any
        complete block gets 0) and its scores choose the blocks (block_indices is ignored):
        per kv group the token's own block, then the others by summed probability, ties by the
        seed's c * 1e-8 and then the lower index; never a block twice.
      g_slc: [B, T, Hq] gate of the selection branch (absent: weight 1).
      block_indices: int [B, T, Hkv, S] (or the seed's per-query-block [B, Hkv, NB, S]): the
        blocks each token's kv group attends, when g_cmp is absent; negative entries and blocks
        past the token's own are ignored, and a block listed twice is attended once (the seed
        counts its keys twice).
      block_counts: int (the top-k size, and how many leading slots count), or int [B, T, Hkv]
        (or [B, Hkv, NB]) per-token counts, whose first entry is the top-k size, as the seed's.
      cu_seqlens: int [N + 1], packed varlen (batch 1): sequences start at these offsets and
        never see each other; block indices count from each sequence's start. Its values must
        be concrete (they size each sequence's blocks). The seed does not support it.
      softmax_scale: multiplies q.k in both branches (default 1/sqrt(D)).
      platform: None or "auto" (where query is), "cpu", "cuda"; on CUDA the selection's forward
        and backward run on tensor cores (bfloat16, float16).
      cfg: None (the selection op has no tuning values).

    Returns:
      [B, T, Hq, D] in query's dtype: o_slc * g_slc + o_cmp * g_cmp. Gradients reach query,
      key, value (through the selection op's backward and the compression's autodiff), g_cmp and
      g_slc; block choices are not differentiated.
    """
    xp = _Xp(fw)
    q, k, v = fw.array("query", query), fw.array("key", key), fw.array("value", value)
    fw.on_platform("native_sparse_attention", _kit.platform(platform), q)
    g_cmp, g_slc = fw.array("g_cmp", g_cmp), fw.array("g_slc", g_slc)
    if block_indices is not None:
        block_indices = fw.array("block_indices", block_indices)
    if not isinstance(block_counts, int):
        block_counts = fw.array("block_counts", block_counts)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"query, key, value: expected [B, T, H, D] arrays (BTHD), got shapes {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"key: num_kv_heads ({k.shape[2]}) must divide num_q_heads ({q.shape[2]})")
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    if cu_seqlens is None:
        return _dense(fw, xp, q, k, v, g_cmp, g_slc, block_indices, block_counts, scale, cfg)
    if q.shape[0] != 1:
        raise ValueError(f"query: packed varlen (cu_seqlens) takes batch 1, got batch {q.shape[0]}")
    cu = _bounds(cu_seqlens, q.shape[1])

    def piece(x, lo, hi):
        return None if x is None or isinstance(x, int) else x[:, lo:hi]

    outs = []
    for lo, hi in zip(cu[:-1], cu[1:]):
        if hi == lo:
            continue
        outs.append(_dense(fw, xp, q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], piece(g_cmp, lo, hi), piece(g_slc, lo, hi),
                           piece(block_indices, lo, hi), piece(block_counts, lo, hi) if not isinstance(block_counts, int)
                           else block_counts, scale, cfg))
    return xp.concat(outs, 1) if outs else q * 0


WRAPPERS = (native_sparse_attention,)

DOCS = {"torch": {"on": ", on torch tensors"}}


def _backward(call, shape, inputs, scalars, grads, outputs):
    """nsa_selection_attention_backward on the forward's inputs, its saved out and lse, and the
    gradients of out and lse."""
    result = call("nsa_selection_attention_backward", q=inputs["q"], k=inputs["k"], v=inputs["v"],
                  block_indices=inputs["block_indices"], block_counts=inputs.get("block_counts"),
                  out=outputs["out"], lse=outputs["lse"], d_out=grads["out"], d_lse=grads.get("lse"), **scalars)
    return {"q": result["dq"], "k": result["dk"], "v": result["dv"]}


_backward.uses_outputs = True  # out and lse are saved by the forward, never recomputed
GRADIENTS = {"nsa_selection_attention": _backward}


def _vmap(op, size, names, in_batched, operands):
    """Every operand leads with B and examples are independent along it (dk and dv sum within
    an example only): the mapped axis folds into B, one launch."""
    from .. import _batching
    q = operands[0]
    batch = q.shape[1] if in_batched[0] else q.shape[0]
    outs = op(*(_batching.fold(x, b, size) for x, b in zip(operands, in_batched)))
    return tuple(_batching.unfold(y, size, batch) for y in outs)


VMAP = {"nsa_selection_attention": _vmap, "nsa_selection_attention_backward": _vmap}
