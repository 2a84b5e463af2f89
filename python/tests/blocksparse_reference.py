"""A float64 block-sparse attention forward in BHSD written with array ops only (any `xp`: numpy,
jax.numpy or torch), so a framework's autodiff of it is the reference gradient: the token mask is
the block layout expanded to tokens, and flash_grad_reference's positions and segments."""
import numpy as np

import flash_grad_reference as flash_ref


def token_mask(layout, sq, sk, bq, bk, causal=False, window=None, q_seg=None, kv_seg=None):
    """[B|1, Hq|1, Sq, Sk] bool (NumPy): the layout's blocks, then causal, window and segments."""
    vis = np.asarray(flash_ref.visible_mask(np, sq, sk, causal, window, q_seg, kv_seg))[:, None]  # [B|1, 1, Sq, Sk]
    if layout is None:
        return vis
    lay = np.asarray(layout) != 0
    tokens = np.repeat(np.repeat(lay, bq, axis=2), bk, axis=3)[:, :, :sq, :sk]
    return vis & tokens


def _is_torch(xp):
    return xp.__name__ == "torch"


def attention(xp, q, k, v, visible, sinks=None, scale=None, softcap=None):
    """q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D], visible [B|1, Hq|1, Sq, Sk], sinks [Hq, S] or [S].
    Returns out [B, Hq, Sq, D] (0 where a row sees no key) and lse [B, Hq, Sq]."""
    hq, hkv, d = q.shape[1], k.shape[1], q.shape[3]
    scale = 1.0 / d ** 0.5 if scale is None else scale
    group = hq // hkv
    k = xp.repeat_interleave(k, group, dim=1) if _is_torch(xp) else xp.repeat(k, group, axis=1)
    v = xp.repeat_interleave(v, group, dim=1) if _is_torch(xp) else xp.repeat(v, group, axis=1)
    s = scale * xp.einsum("bhqd,bhkd->bhqk", q, k)
    if softcap is not None:
        s = softcap * xp.tanh(s / softcap)
    visible = xp.asarray(visible) if not _is_torch(xp) else xp.as_tensor(visible)
    s = xp.where(visible, s, -xp.inf)
    if sinks is not None:
        sinks = xp.broadcast_to(sinks if sinks.ndim == 2 else sinks[None], (hq, sinks.shape[-1]))
        tail = xp.broadcast_to(sinks[None, :, None, :], tuple(s.shape[:3]) + tuple(sinks.shape[-1:]))
        full = xp.cat([s, tail], dim=-1) if _is_torch(xp) else xp.concatenate([s, tail], axis=-1)
    else:
        full = s
    m = xp.amax(full, dim=-1, keepdim=True) if _is_torch(xp) else xp.max(full, axis=-1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0.0)
    e = xp.exp(full - m)
    denom = xp.sum(e, dim=-1, keepdim=True) if _is_torch(xp) else xp.sum(e, axis=-1, keepdims=True)
    p = e[..., :s.shape[-1]] / xp.where(denom > 0, denom, 1.0)
    out = xp.einsum("bhqk,bhkd->bhqd", p, v)
    lse = (m + xp.log(denom))[..., 0]
    return out, lse
