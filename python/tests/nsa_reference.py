"""Float64 references of native sparse attention: the seed's selection (top-k over the
compression scores, NumPy) and a dense masked implementation of the whole op written once for
jax.numpy and torch (float64 autodiff gives the reference gradients). A block selected twice
counts once: the mask is per key."""
import numpy as np

BLOCK = 64


def select(q, k, scale, count):
    """The seed's top-k in float64: exp(s - lse) over earlier complete blocks, the own block 1,
    summed over the kv group, future blocks -inf, + c * 1e-8, top `count` (ties to the lower
    index), those past the own block -1. q [B, T, Hq, D], k [B, T, Hkv, D] NumPy."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    b, t, hq, d = q.shape
    hkv, nc, nb = k.shape[2], t // BLOCK, -(-t // BLOCK)
    k_cmp = k[:, :nc * BLOCK].reshape(b, nc, BLOCK, hkv, d).mean(2)
    s = np.einsum("bthd,bchd->bthc", q, np.repeat(k_cmp, hq // hkv, 2)) * scale
    done = (np.arange(t) + 1) // BLOCK
    seen = np.arange(nc)[None, :] < done[:, None]
    lse = np.zeros((b, t, hq))
    for i in range(t):
        if done[i]:
            row = s[:, i][..., seen[i]]
            m = row.max(-1, keepdims=True)
            lse[:, i] = (m + np.log(np.exp(row - m).sum(-1, keepdims=True)))[..., 0]
    own = np.arange(t) // BLOCK
    p = np.zeros((b, t, hq, nb))
    p[..., :nc] = np.exp(s - lse[..., None])
    c = np.arange(nb)
    p = np.where((c[None, :] < own[:, None])[None, :, None], p, 0.0)
    p = np.where((c[None, :] == own[:, None])[None, :, None], 1.0, p)
    p_sum = p.reshape(b, t, hkv, hq // hkv, nb).sum(3)
    p_sum = np.where((c[None, :] > own[:, None])[None, :, None], -np.inf, p_sum) + c * 1e-8
    idx = np.argsort(-p_sum, axis=-1, kind="stable")[..., :min(count, nb)]
    return np.where(idx <= own[None, :, None, None], idx, -1).astype(np.int32)


def key_mask(block_indices, counts, t):
    """[B, T, Hkv, T] bool: key j visible from token i (j <= i, its block among the counted slots)."""
    idx = np.asarray(block_indices)
    b, _, hkv, s = idx.shape
    counts = np.full((b, t, hkv), s) if counts is None else np.clip(np.asarray(counts), 0, s)
    slot_on = np.arange(s)[None, None, None, :] < counts[..., None]
    blocks = np.arange(t) // BLOCK
    hit = (idx[..., None] == blocks) & slot_on[..., None]  # [B, T, Hkv, S, T]
    return hit.any(3) & (np.arange(t)[None, :] <= np.arange(t)[:, None])[None, :, None, :]


class _Ops:
    def __init__(self, xp):
        self.xp, self.torch = xp, xp.__name__ == "torch"

    def t(self, x, like):
        x = np.asarray(x)
        return self.xp.asarray(x) if not self.torch else self.xp.as_tensor(x, device=like.device)

    def amax(self, x, axis):
        return x.max(axis=axis, keepdims=True) if not self.torch else x.amax(dim=axis, keepdim=True)

    def sum(self, x, axis):
        return x.sum(axis=axis, keepdims=True) if not self.torch else x.sum(dim=axis, keepdim=True)

    def repeat(self, x, n, axis):
        return self.xp.repeat(x, n, axis=axis) if not self.torch else x.repeat_interleave(n, dim=axis)


def _softmax_rows(o, s, mask):
    """Softmax of s where mask, 0 for rows without a visible entry (and their lse 0)."""
    xp = o.xp
    s = xp.where(mask, s, -1e300)
    m = o.amax(s, -1)
    e = xp.where(mask, xp.exp(s - m), 0.0)
    z = o.sum(e, -1)
    return e / xp.where(z > 0, z, 1.0), xp.where(z > 0, m + xp.log(xp.where(z > 0, z, 1.0)), 0.0)


def nsa(xp, q, k, v, g_cmp, g_slc, block_indices, counts, scale):
    """The whole op, dense and masked, in the arrays' float dtype (float64 for the reference).
    block_indices: the selection (NumPy int, from select() or the caller); counts: NumPy
    [B, T, Hkv] or None."""
    o = _Ops(xp)
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    group = hq // hkv
    mask = o.t(key_mask(block_indices, counts, t), q)  # [B, T, Hkv, T]
    mask_h = o.repeat(mask, group, 2)
    s = xp.einsum("bihd,bjhd->bihj", q, o.repeat(k, group, 2)) * scale
    p, _ = _softmax_rows(o, s, mask_h)
    out = xp.einsum("bihj,bjhd->bihd", p, o.repeat(v, group, 2))
    if g_slc is not None:
        out = out * g_slc[..., None]
    if g_cmp is not None and t >= BLOCK:  # before the first complete block the branch gives 0
        nc = t // BLOCK
        k_cmp = k[:, :nc * BLOCK].reshape(b, nc, BLOCK, hkv, d).mean(2)
        v_cmp = v[:, :nc * BLOCK].reshape(b, nc, BLOCK, hkv, d).mean(2)
        sc = xp.einsum("bihd,bchd->bihc", q, o.repeat(k_cmp, group, 2)) * scale
        seen = (np.arange(nc)[None, :] < ((np.arange(t) + 1) // BLOCK)[:, None])[None, :, None, :]
        pc, _ = _softmax_rows(o, sc, o.t(np.broadcast_to(seen, sc.shape).copy(), q))
        out = out + xp.einsum("bihc,bchd->bihd", pc, o.repeat(v_cmp, group, 2)) * g_cmp[..., None]
    return out
