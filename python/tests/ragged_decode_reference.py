"""The float64 reference of ragged_decode_attention, from the seed's definition (NumPy only, for
the JAX and the torch tests)."""
import numpy as np


def reference(q, k, v, start, end, aux=None, window=None, cap=None, scale=None):
    """float64: query head h of sequence b over keys start <= j < end (and the window around
    end - 1), sinks in the denominator only; no visible key and no sink gives zeros."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b_, hq, d = q.shape
    s_len, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    scale = 1 / np.sqrt(d) if scale is None else scale
    out = np.zeros_like(q)
    j = np.arange(s_len)
    for b in range(b_):
        visible = (j >= start[b]) & (j < end[b])
        if window is not None:
            visible &= (j >= end[b] - 1 - window[0]) & (j <= end[b] - 1 + window[1])
        for h in range(hq):
            s = k[b, :, h // g] @ q[b, h] * scale
            if cap is not None:
                s = cap * np.tanh(s / cap)
            sinks = np.zeros(0) if aux is None else np.asarray(aux, np.float64)
            if sinks.ndim == 2:
                sinks = sinks[h] if sinks.shape[0] == hq else sinks[h // g]
            logits = np.concatenate([s[visible], sinks])
            if logits.size == 0:
                continue
            p = np.exp(logits - logits.max())
            out[b, h] = p[:visible.sum()] @ v[b, visible, h // g] / p.sum()
    return out
