"""A float64 flash attention forward written with array ops only (any `xp`: numpy or jax.numpy),
so a framework's autodiff of it is the reference gradient: the semantics of
kernels/ejk/kernels/common/mask.h, dense or packed varlen."""


def visible_mask(xp, sq, sk, causal=False, window=None, q_seg=None, kv_seg=None, cum_q=None, cum_k=None):
    """[B|1, Sq, Sk] bool: positions within each (packed) sequence, then segments."""
    import numpy as np
    if cum_q is not None:
        seq_q = np.searchsorted(np.asarray(cum_q), np.arange(sq), side="right") - 1
        seq_k = np.searchsorted(np.asarray(cum_k), np.arange(sk), side="right") - 1
        pos_q, pos_k = np.arange(sq) - np.asarray(cum_q)[seq_q], np.arange(sk) - np.asarray(cum_k)[seq_k]
        same = seq_q[:, None] == seq_k[None, :]
    else:
        pos_q, pos_k = np.arange(sq), np.arange(sk)
        same = np.ones((sq, sk), bool)
    qi, kj = pos_q[:, None], pos_k[None, :]
    vis = same.copy()
    if window is not None:
        vis &= (kj >= qi - window[0]) & (kj <= qi + window[1])
    if causal:
        vis &= kj <= qi
    vis = vis[None]
    if q_seg is not None:
        q_seg, kv_seg = np.asarray(q_seg), np.asarray(kv_seg)
        vis = vis & (q_seg[:, :, None] == kv_seg[:, None, :]) & (q_seg[:, :, None] >= 0)
    return xp.asarray(vis)


def _is_torch(xp):
    return xp.__name__ == "torch"


def _repeat(xp, x, n, axis):
    return xp.repeat_interleave(x, n, dim=axis) if _is_torch(xp) else xp.repeat(x, n, axis=axis)


def _amax(xp, x):
    return xp.amax(x, dim=-1, keepdim=True) if _is_torch(xp) else xp.max(x, axis=-1, keepdims=True)


def _sum(xp, x):
    return xp.sum(x, dim=-1, keepdim=True) if _is_torch(xp) else xp.sum(x, axis=-1, keepdims=True)


def attention(xp, q, k, v, visible, bias=None, sinks=None, scale=None, softcap=None, drop=None):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], visible [B|1, Sq, Sk] or [B|1, Hq|1, Sq, Sk], bias [B|1, Hq|1, Sq, Sk],
    sinks [Hq, S] or [S], drop [B, Hq, Sq, Sk] the dropout factors (keep / (1 - p), applied to the
    weights after the softmax; lse does not see them). Returns out [B, Sq, Hq, D] and lse [B, Hq, Sq]."""
    hq, hkv, d = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / d ** 0.5 if scale is None else scale
    k = _repeat(xp, k, hq // hkv, 2)
    v = _repeat(xp, v, hq // hkv, 2)
    s = scale * xp.einsum("bqhd,bkhd->bhqk", q, k)
    if bias is not None:
        s = s + bias
    if softcap is not None:
        s = softcap * xp.tanh(s / softcap)
    s = xp.where(visible if visible.ndim == 4 else visible[:, None], s, -xp.inf)
    if sinks is not None:
        sinks = xp.broadcast_to(sinks if sinks.ndim == 2 else sinks[None], (hq, sinks.shape[-1]))
        tail = xp.broadcast_to(sinks[None, :, None, :], tuple(s.shape[:3]) + tuple(sinks.shape[-1:]))
        full = xp.cat([s, tail], dim=-1) if _is_torch(xp) else xp.concatenate([s, tail], axis=-1)
    else:
        full = s
    m = _amax(xp, full)
    m = xp.where(xp.isfinite(m), m, 0.0)
    e = xp.exp(full - m)
    denom = _sum(xp, e)
    p = e[..., :s.shape[-1]] / xp.where(denom > 0, denom, 1.0)
    out = xp.einsum("bhqk,bkhd->bqhd", p if drop is None else p * drop, v)
    lse = (m + xp.log(denom))[..., 0]
    return out, lse
