"""page_attention's semantics in float64 numpy, for the JAX and PyTorch tests: each sequence's
visible positions gathered from its pages, then a plain softmax."""
import numpy as np


def page_attention(query, key_cache, value_cache, context_lens, block_tables, attn_scale=None,
                   max_context_len=None, attn_logits_soft_cap=None, sliding_window=None):
    q, kc, vc = (np.asarray(a, np.float64) for a in (query, key_cache, value_cache))
    lens, tables = np.asarray(context_lens), np.asarray(block_tables)
    s_count, hq, d = q.shape
    hkv, bs = kc.shape[1], kc.shape[2]
    scale = np.float32(1.0 / np.sqrt(d)) if attn_scale is None else np.float32(attn_scale)
    out = np.zeros_like(q)
    for s in range(s_count):
        n = int(lens[s]) if max_context_len is None else min(int(lens[s]), max_context_len)
        first = 0 if sliding_window is None else max(0, n - sliding_window)
        pos = np.arange(first, n)
        if pos.size == 0:
            continue
        blocks = tables[s, pos // bs]
        for h in range(hq):
            g = h // (hq // hkv)
            k, v = kc[blocks, g, pos % bs], vc[blocks, g, pos % bs]
            x = (k @ q[s, h]) * np.float64(scale)
            if attn_logits_soft_cap is not None:
                cap = np.float64(np.float32(attn_logits_soft_cap))
                x = cap * np.tanh(x / cap)
            w = np.exp(x - x.max())
            out[s, h] = (w / w.sum()) @ v
    return out


def random_problem(rng, s=4, hq=8, hkv=2, d=64, bs=16, max_blocks=6, lens=None):
    """Shuffled, non-contiguous page tables over a cache with spare blocks; lengths include 0 and
    1 unless given; the entries past each context are -1 (never read)."""
    nb = s * max_blocks + 3
    if lens is None:
        lens = rng.integers(0, max_blocks * bs + 1, s)
        lens[:2] = [0, 1][:s]
        lens[-1] = max_blocks * bs
    perm = rng.permutation(nb)[: s * max_blocks].reshape(s, max_blocks)
    used = np.arange(max_blocks)[None, :] * bs < np.asarray(lens)[:, None]
    tables = np.where(used, perm, -1).astype(np.int32)
    return dict(query=rng.standard_normal((s, hq, d)), key_cache=rng.standard_normal((nb, hkv, bs, d)),
                value_cache=rng.standard_normal((nb, hkv, bs, d)), context_lens=np.asarray(lens, np.int32),
                block_tables=tables)
