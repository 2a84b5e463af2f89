"""float64 NumPy references of the ops, written from their definitions
(kernels/ejk/kernels/common/mask.h and the specs), independent of the kernels."""
import numpy as np


def _attention_rows(q, k, v, scale, causal, window, softcap, sinks, bias, q_seg, kv_seg, normalize):
    """One sequence: q [Sq, Hq, D], k/v [Sk, Hkv, D]; sinks [Hq, S] or None; bias [Hq, Sq, Sk] or
    None. Returns out [Sq, Hq, D] and lse [Hq, Sq]."""
    sq, hq, _ = q.shape
    sk, hkv, _ = k.shape
    group = hq // hkv
    qi, kj = np.arange(sq)[:, None], np.arange(sk)[None, :]
    visible = np.ones((sq, sk), bool)
    if window is not None:
        visible &= (kj >= qi - window[0]) & (kj <= qi + window[1])
    if causal:
        visible &= kj <= qi
    if q_seg is not None:
        visible &= (q_seg[:, None] == kv_seg[None, :]) & (q_seg[:, None] >= 0)
    out = np.zeros((sq, hq, v.shape[-1]))
    lse = np.full((hq, sq), -np.inf)
    for h in range(hq):
        s = scale * q[:, h, :] @ k[:, h // group, :].T
        if bias is not None:
            s = s + bias[h]
        if softcap is not None:
            s = softcap * np.tanh(s / softcap)
        s = np.where(visible, s, -np.inf)
        sink = sinks[h] if sinks is not None else np.zeros(0)
        m = np.maximum(s.max(axis=1), sink.max() if sink.size else -np.inf)
        has = np.isfinite(m)
        m_safe = np.where(has, m, 0.0)
        p = np.exp(s - m_safe[:, None])
        denom = p.sum(axis=1) + np.exp(sink[None, :] - m_safe[:, None]).sum(axis=1)
        acc = p @ v[:, h // group, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, h, :] = np.where(has[:, None], acc / denom[:, None] if normalize else acc, 0.0)
            lse[h] = np.where(has, m_safe + np.log(denom), -np.inf)
    return out, lse


def flash_attention(q, k, v, bias=None, q_segment_ids=None, kv_segment_ids=None, cum_seqlens_q=None,
                    cum_seqlens_k=None, softmax_aux=None, softmax_scale=None, causal=False, sliding_window=None,
                    logits_soft_cap=None, normalize_output=True):
    """Dense: q [B, Sq, Hq, D] -> out, lse [B, Hq, Sq]. Packed varlen: q [Tq, Hq, D] with
    cum_seqlens -> out [Tq, Hq, D], lse [1, Hq, Tq]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if softmax_scale is None else softmax_scale
    window = (sliding_window, sliding_window) if isinstance(sliding_window, int) else sliding_window
    hq = q.shape[-2]
    sinks = None
    if softmax_aux is not None:
        sinks = np.asarray(softmax_aux, np.float64)
        sinks = np.broadcast_to(sinks, (hq, sinks.shape[-1])) if sinks.ndim == 1 else sinks
    common = dict(scale=scale, causal=causal, window=window, softcap=logits_soft_cap, sinks=sinks,
                  normalize=normalize_output)
    if cum_seqlens_q is not None:
        out, lse = np.zeros(q.shape), np.full((1, hq, q.shape[0]), -np.inf)
        cq, ck = np.asarray(cum_seqlens_q), np.asarray(cum_seqlens_k)
        for n in range(len(cq) - 1):
            rows, keys = slice(cq[n], cq[n + 1]), slice(ck[n], ck[n + 1])
            out[rows], lse[0, :, rows] = _attention_rows(q[rows], k[keys], v[keys], bias=None, q_seg=None,
                                                         kv_seg=None, **common)
        return out, lse
    out, lse = np.zeros(q.shape), np.zeros((q.shape[0], hq, q.shape[1]))
    for b in range(q.shape[0]):
        bb = None if bias is None else np.broadcast_to(np.asarray(bias, np.float64)[min(b, bias.shape[0] - 1)],
                                                       (hq, q.shape[1], k.shape[1]))
        qs = None if q_segment_ids is None else np.asarray(q_segment_ids)[b]
        ks = None if kv_segment_ids is None else np.asarray(kv_segment_ids)[b]
        out[b], lse[b] = _attention_rows(q[b], k[b], v[b], bias=bb, q_seg=qs, kv_seg=ks, **common)
    return out, lse


def mean_pooling(x, cu_seqlens=None):
    x = np.asarray(x, np.float64)
    if cu_seqlens is None:
        return x.mean(axis=1)
    cu = np.asarray(cu_seqlens)
    return np.stack([x[cu[n]:cu[n + 1]].mean(axis=0) if cu[n + 1] > cu[n] else np.zeros(x.shape[1])
                     for n in range(len(cu) - 1)])


def merge_attention_states(out_a, lse_a, out_b, lse_b):
    """out [..., T, H, D], lse [..., H, T]."""
    out_a, lse_a, out_b, lse_b = (np.asarray(x, np.float64) for x in (out_a, lse_a, out_b, lse_b))
    m = np.maximum(lse_a, lse_b)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    wa, wb = np.exp(lse_a - m_safe), np.exp(lse_b - m_safe)
    total = wa + wb
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(total > 0, m_safe + np.log(total), -np.inf)
        fa = np.where(total > 0, wa / total, 0.0)
        fb = np.where(total > 0, wb / total, 0.0)
    # weights are [..., H, T]; outputs [..., T, H, D]
    fa, fb = np.swapaxes(fa, -1, -2)[..., None], np.swapaxes(fb, -1, -2)[..., None]
    return fa * out_a + fb * out_b, lse
