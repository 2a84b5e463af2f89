"""A ragged_page_attention_v3 problem and its float64 reference from the seed's definition (NumPy
only, for the JAX and the torch tests): the cache after this call's write, and the attention."""
import numpy as np

PAGE, PPS = 8, 6  # page size, pages per sequence


def problem(rng, hq=8, hkv=2, d=64, pack=1):
    """Three sequences (a prefill of 11, a chunk of 5 after 20 cached, a decode step after 30),
    a fourth row of the tables not processed; distinct random pages per sequence."""
    q_lens, kv_lens = [11, 5, 1, 0], [11, 25, 31, 0]
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    t = int(qsl[-1])
    dpad = -(-d // 128) * 128
    pages = rng.permutation(4 * PPS).astype(np.int32)
    cache = np.zeros((4 * PPS, PAGE, 2 * hkv // pack, pack, dpad), np.float32)
    cache[..., :d] = rng.standard_normal(cache[..., :d].shape)
    def randn(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    return dict(q=randn(t, hq, d), k=randn(t, hkv, d), v=randn(t, hkv, d), cache=cache,
                kv_lens=np.asarray(kv_lens, np.int32), tables=pages, qsl=qsl, dist=np.asarray([0, 0, 3], np.int32))


def visible(n, qpos, window):
    """Which of n cache positions the query at qpos sees: up to its own, the window's newest."""
    j = np.arange(n)
    seen = j <= qpos
    if window is not None:
        seen &= j > qpos - window
    return seen


def reference(p, sinks=None, scale=1.0, window=None, cap=None, q_scale=None, k_scale=None, v_scale=None):
    """float64: the cache after the write, and each processed token's attention over it."""
    q, k, v, cache = (np.asarray(p[n], np.float64) for n in ("q", "k", "v", "cache"))
    t, hq, d = q.shape
    hkv = k.shape[1]
    flat = cache.reshape(cache.shape[0], PAGE, 2 * hkv, cache.shape[-1]).copy()
    out = np.zeros_like(q)
    g = hq // hkv
    for s in range(int(p["dist"][2])):
        a, b, n = p["qsl"][s], p["qsl"][s + 1], p["kv_lens"][s]
        for i, tok in enumerate(range(a, b)):
            pos = n - (b - a) + i
            page = p["tables"][s * PPS + pos // PAGE]
            flat[page, pos % PAGE, 0::2, :d] = k[tok]
            flat[page, pos % PAGE, 1::2, :d] = v[tok]
        keys = np.stack([flat[p["tables"][s * PPS + j // PAGE], j % PAGE] for j in range(n)]) if n else None
        for i, tok in enumerate(range(a, b)):
            qpos = n - (b - a) + i
            for h in range(hq):
                qq = q[tok, h] if q_scale is None else q[tok, h] / q_scale
                logit = keys[:, 2 * (h // g), :d] @ qq * scale * (k_scale or 1) * (q_scale or 1)
                if cap is not None:
                    logit = cap * np.tanh(logit / cap)
                seen = visible(n, qpos, window)
                x = np.concatenate([logit[seen], [] if sinks is None else [float(sinks[h])]])
                w = np.exp(x - x.max())
                out[tok, h] = w[:seen.sum()] @ keys[seen, 2 * (h // g) + 1, :d] / w.sum() * (v_scale or 1)
    return out, flat.reshape(cache.shape)
