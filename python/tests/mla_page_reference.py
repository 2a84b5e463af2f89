"""A multi_latent_ragged_page_attention problem and its float64 reference from the seed's
definition (NumPy only, for the JAX and the torch tests): the cache after this call's write, and
the latent attention over it."""
import numpy as np

from ragged_page_v3_reference import visible

PPS = 6  # pages per sequence


def align128(n):
    return -(-n // 128) * 128


def problem(rng, hq=16, r=512, e=64, page=8, pack=1):
    """Four sequences (a prefill of 11, a chunk of 5 after 20 cached, a decode step after 30, an
    empty query range), a fifth row of the tables not processed, one token past every sequence;
    distinct random pages per sequence (the unused ones included)."""
    q_lens, kv_lens = [11, 5, 1, 0, 0], [11, 25, 31, 7, 0]
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    t = int(qsl[-1]) + 1
    pages = rng.permutation(5 * PPS).astype(np.int32)
    cache = np.zeros((5 * PPS, page // pack, pack, align128(r) + align128(e)), np.float32)
    cache[..., :r] = rng.standard_normal(cache[..., :r].shape)
    cache[..., align128(r):align128(r) + e] = rng.standard_normal(cache[..., :e].shape)

    def randn(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    return dict(qn=randn(t, hq, r), qp=randn(t, hq, e), kv=randn(t, r), kp=randn(t, e), cache=cache,
                kv_lens=np.asarray(kv_lens, np.int32), tables=pages, qsl=qsl, dist=np.asarray([1, 3, 4], np.int32))


def reference(p, scale=None, window=None, cap=None, q_scale=None, k_scale=None, v_scale=None):
    """float64: the cache after the write, and each processed token's attention over it."""
    qn, qp, kv, kp, cache = (np.asarray(p[n], np.float64) for n in ("qn", "qp", "kv", "kp", "cache"))
    t, hq, r = qn.shape
    e = qp.shape[2]
    page = cache.shape[1] * cache.shape[2]
    flat = cache.reshape(cache.shape[0], page, cache.shape[3]).copy()
    off = align128(r)
    scale = (r + e) ** -0.5 if scale is None else scale
    out = np.zeros_like(qn)
    for s in range(int(p["dist"][2])):
        a, b, n = p["qsl"][s], p["qsl"][s + 1], p["kv_lens"][s]
        for i, tok in enumerate(range(a, b)):
            pos = n - (b - a) + i
            row = flat[p["tables"][s * PPS + pos // page], pos % page]
            row[:] = 0
            row[:r], row[off:off + e] = kv[tok], kp[tok]
        rows = np.stack([flat[p["tables"][s * PPS + j // page], j % page] for j in range(n)]) if n else None
        for i, tok in enumerate(range(a, b)):
            qpos = n - (b - a) + i
            logit = (rows[:, :r] @ qn[tok].T + rows[:, off:off + e] @ qp[tok].T) * scale  # [n, Hq]
            logit *= (q_scale or 1) * (k_scale or 1)
            if cap is not None:
                logit = cap * np.tanh(logit / cap)
            seen = visible(n, qpos, window)
            w = np.exp(logit[seen] - logit[seen].max(0))
            out[tok] = (w / w.sum(0)).T @ rows[seen, :r] * (v_scale or 1)
    return out, flat.reshape(cache.shape)
