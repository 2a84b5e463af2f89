"""decode_attention's and chunked_prefill_paged_decode's semantics in float64 NumPy (the seed's
definitions, written from its docstrings), with random problems for the JAX and torch tests."""
import numpy as np


def _softmax_rows(x, sink=None):
    """(weights, log-sum-exp) of logits x, a sink joining the denominator only."""
    m = x.max(initial=-np.inf) if sink is None else max(x.max(initial=-np.inf), sink)
    if not np.isfinite(m):
        return np.zeros_like(x), -np.inf
    w = np.exp(x - m)
    den = w.sum() + (0.0 if sink is None else np.exp(sink - m))
    return w / den, m + np.log(den)


def decode_attention(query, key_buffer, value_buffer, req_to_tokens, seq_lens, page_size=1, softmax_scale=None,
                     logits_soft_cap=None):
    q, kb, vb = (np.asarray(a, np.float64) for a in (query, key_buffer, value_buffer))
    tables, lens = np.asarray(req_to_tokens), np.asarray(seq_lens)
    b, hq, d = q.shape
    hkv = kb.shape[1]
    scale = np.float32(1.0 / np.sqrt(d)) if softmax_scale is None else np.float32(softmax_scale)
    out, lse = np.zeros_like(q), np.full((b, hq), -np.inf)
    for s in range(b):
        j = np.arange(int(lens[s]))
        rows = tables[s, j // page_size] * page_size + j % page_size
        for h in range(hq):
            g = h // (hq // hkv)
            x = (kb[rows, g] @ q[s, h]) * np.float64(scale)
            if logits_soft_cap is not None:
                cap = np.float64(np.float32(logits_soft_cap))
                x = cap * np.tanh(x / cap)
            w, lse[s, h] = _softmax_rows(x)
            out[s, h] = w @ vb[rows, g] if j.size else 0.0
    return out, lse


def random_decode(rng, b=4, hq=8, hkv=2, d=64, ps=1, context=40, empty=True):
    """b sequences, contexts random in [0, context] (the first empty with `empty`, one not a
    multiple of the page size, the last full), shuffled distinct pages of a buffer with spares;
    table entries past each context are -1 (never read)."""
    mp = -(-context // ps)
    lens = rng.integers(0, context + 1, b).astype(np.int32)
    lens[-1] = context
    if b > 1:
        lens[1] = max(1, (context // 2) // ps * ps + 1) if ps > 1 else lens[1]
    if empty:
        lens[0] = 0
    pages = b * mp + 3
    tables = rng.permutation(pages)[: b * mp].reshape(b, mp).astype(np.int32)
    tables[np.arange(mp)[None, :] * ps >= lens[:, None]] = -1
    return dict(query=rng.standard_normal((b, hq, d)), key_buffer=rng.standard_normal((pages * ps, hkv, d)),
                value_buffer=rng.standard_normal((pages * ps, hkv, d)), req_to_tokens=tables, seq_lens=lens)


def write_caches(keys, values, key_cache, value_cache, kv_lens, block_tables, query_start_loc):
    """The caches after the write: token i of sequence s's n at position kv_lens[s] - n + i."""
    kc, vc = np.array(key_cache), np.array(value_cache)
    bs = kc.shape[1]
    for s in range(len(kv_lens)):
        a, e = int(query_start_loc[s]), int(query_start_loc[s + 1])
        for i, t in enumerate(range(a, e)):
            pos = int(kv_lens[s]) - (e - a) + i
            kc[block_tables[s, pos // bs], pos % bs] = keys[t]
            vc[block_tables[s, pos // bs], pos % bs] = values[t]
    return kc, vc


def chunked_prefill_paged_decode(queries, keys, values, key_cache, value_cache, kv_lens, block_tables,
                                 query_start_loc, alibi_slopes=None, softmax_aux=None, softmax_scale=None,
                                 causal=True, sliding_window=None, logits_soft_cap=None):
    """(out, key_cache, value_cache) in float64: the write, then each token's attention."""
    f = [np.asarray(a, np.float64) for a in (queries, keys, values, key_cache, value_cache)]
    q = f[0]
    lens, tables, starts = (np.asarray(a) for a in (kv_lens, block_tables, query_start_loc))
    kc, vc = write_caches(f[1], f[2], f[3], f[4], lens, tables, starts)
    hq, d = q.shape[1:]
    bs, hkv = kc.shape[1], kc.shape[2]
    scale = np.float32(1.0 / np.sqrt(d)) if softmax_scale is None else np.float32(softmax_scale)
    slopes, sinks = (None if a is None else np.asarray(a, np.float32).astype(np.float64)
                     for a in (alibi_slopes, softmax_aux))
    out = np.zeros_like(q)
    for s in range(len(lens)):
        n_q, n_kv = int(starts[s + 1] - starts[s]), int(lens[s])
        ctx = n_kv - n_q
        for i in range(n_q):
            t, pos = int(starts[s]) + i, ctx + i
            first = 0 if sliding_window is None else max(0, pos - sliding_window + 1)
            j = np.arange(first, pos + 1 if causal else n_kv)
            blocks, slots = tables[s, j // bs], j % bs
            for h in range(hq):
                g = h // (hq // hkv)
                x = (kc[blocks, slots, g] @ q[t, h]) * np.float64(scale)
                if slopes is not None:
                    x = x + slopes[h] * (j - ctx)
                if logits_soft_cap is not None:
                    cap = np.float64(np.float32(logits_soft_cap))
                    x = cap * np.tanh(x / cap)
                w, _ = _softmax_rows(x, None if sinks is None else sinks[h])
                out[t, h] = w @ vc[blocks, slots, g] if j.size else 0.0
    return out, kc, vc


def random_chunked(rng, q_lens=(1, 9, 1, 4, 1), hq=8, hkv=2, d=64, bs=16, max_blocks=4, bias=False):
    """Decode steps (1) and prefill chunks mixed; each context random in [q_len, capacity] (the
    first prefill a fresh one, its context its chunk; one context not a multiple of the block
    size; the last full), shuffled distinct blocks of caches with spares; entries past each
    context are -1; ALiBi slopes and sinks with `bias`."""
    n = len(q_lens)
    cap = max_blocks * bs
    lens = np.array([rng.integers(q, cap + 1) for q in q_lens], np.int32)
    lens[-1] = cap
    prefill = [s for s, q in enumerate(q_lens) if q > 1]
    if prefill:
        lens[prefill[0]] = q_lens[prefill[0]]
    if n > 2 and bs > 1:
        lens[2] = max(q_lens[2], min(cap, bs + 3))
    blocks = n * max_blocks + 3
    tables = rng.permutation(blocks)[: n * max_blocks].reshape(n, max_blocks).astype(np.int32)
    tables[np.arange(max_blocks)[None, :] * bs >= lens[:, None]] = -1
    starts = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    t = int(starts[-1])
    x = dict(queries=rng.standard_normal((t, hq, d)), keys=rng.standard_normal((t, hkv, d)),
             values=rng.standard_normal((t, hkv, d)), key_cache=rng.standard_normal((blocks, bs, hkv, d)),
             value_cache=rng.standard_normal((blocks, bs, hkv, d)), kv_lens=lens, block_tables=tables,
             query_start_loc=starts)
    if bias:
        x.update(alibi_slopes=rng.uniform(-0.3, 0.0, hq), softmax_aux=rng.standard_normal(hq) * 2)
    return x
