"""ragged_page_attention_v2's semantics in float64 numpy, for the JAX and PyTorch tests: each
query's visible positions gathered from its sequence's pages, then a plain softmax with the
sink in the denominator."""
import numpy as np


def ragged_page_attention_v2(queries, kv_pages, context_lens, block_tables, query_start_loc, num_seqs,
                             softmax_aux=None, softmax_scale=None, logits_soft_cap=None, sliding_window=None):
    q, kv = np.asarray(queries, np.float64), np.asarray(kv_pages, np.float64)
    lens, tables, starts = (np.asarray(a) for a in (context_lens, block_tables, query_start_loc))
    t_count, hq, d = q.shape
    ps, hkv = kv.shape[1], kv.shape[2] // 2
    scale = np.float32(1.0 / np.sqrt(d)) if softmax_scale is None else np.float32(softmax_scale)
    sinks = None if softmax_aux is None else np.asarray(softmax_aux, np.float32).astype(np.float64)
    out = np.zeros_like(q)
    for s in range(int(np.asarray(num_seqs).reshape(-1)[0])):
        n_q, n_kv = int(starts[s + 1] - starts[s]), int(lens[s])
        for i in range(n_q):
            t, pos = int(starts[s]) + i, n_kv - n_q + i
            first = 0 if sliding_window is None else max(0, pos - sliding_window + 1)
            j = np.arange(first, pos + 1)
            if j.size == 0:
                continue
            pages, slots = tables[s, j // ps], j % ps
            for h in range(hq):
                g = h // (hq // hkv)
                x = (kv[pages, slots, 2 * g] @ q[t, h]) * np.float64(scale)
                if logits_soft_cap is not None:
                    cap = np.float64(np.float32(logits_soft_cap))
                    x = cap * np.tanh(x / cap)
                m = x.max() if sinks is None else max(x.max(), sinks[h])
                w = np.exp(x - m)
                den = w.sum() + (0.0 if sinks is None else np.exp(sinks[h] - m))
                out[t, h] = (w / den) @ kv[pages, slots, 2 * g + 1]
    return out


def random_problem(rng, q_lens=(1, 1, 0, 5, 12, 1), hq=8, hkv=2, d=64, ps=16, max_pages=6, spare_rows=2,
                   sinks=False):
    """Sequences with the given query lengths (decode 1, empty 0, prefill chunks), contexts random
    in [q_len, max_pages * ps] with the last full and one shorter than a page; spare table rows
    past num_seqs hold garbage; shuffled pages over a cache with spare pages; entries past each
    context are -1 (never read)."""
    n = len(q_lens)
    rows = n + spare_rows
    lens = np.array([rng.integers(q, max_pages * ps + 1) for q in q_lens] + [7] * spare_rows, np.int32)
    lens[-spare_rows - 1] = max_pages * ps
    lens[0] = min(lens[0], max(q_lens[0], ps - 3))  # shorter than a page
    num_pages = rows * max_pages + 3
    perm = rng.permutation(num_pages)[: rows * max_pages].reshape(rows, max_pages)
    used = np.arange(max_pages)[None, :] * ps < lens[:, None]
    tables = np.where(used, perm, -1).astype(np.int32)
    tables[n:] = 10_000  # past num_seqs: never read
    starts = np.concatenate([[0], np.cumsum(list(q_lens) + [0] * spare_rows)]).astype(np.int32)
    x = dict(queries=rng.standard_normal((int(starts[-1]) + 2, hq, d)),
             kv_pages=rng.standard_normal((num_pages, ps, 2 * hkv, d)), context_lens=lens, block_tables=tables,
             query_start_loc=starts, num_seqs=np.array([n], np.int32))
    if sinks:
        x["softmax_aux"] = rng.standard_normal(hq) * 2
    return x


def prefill_page_attention(query, key_cache, value_cache, context_len, page_indices, softmax_scale=None,
                           attn_logits_soft_cap=None, sliding_window=None):
    q, kc, vc = (np.asarray(a, np.float64) for a in (query, key_cache, value_cache))
    n, pages = int(np.asarray(context_len).reshape(-1)[0]), np.asarray(page_indices)
    c, hq, d = q.shape
    hkv, ps = kc.shape[0], kc.shape[2]
    scale = np.float32(1.0 / np.sqrt(d)) if softmax_scale is None else np.float32(softmax_scale)
    out = np.zeros_like(q)
    for i in range(c):
        pos = n - c + i
        j = np.arange(0 if sliding_window is None else max(0, pos - sliding_window + 1), pos + 1)
        if j.size == 0:
            continue
        for h in range(hq):
            g = h // (hq // hkv)
            x = (kc[g, pages[j // ps], j % ps] @ q[i, h]) * np.float64(scale)
            if attn_logits_soft_cap is not None:
                cap = np.float64(np.float32(attn_logits_soft_cap))
                x = cap * np.tanh(x / cap)
            w = np.exp(x - x.max())
            out[i, h] = (w / w.sum()) @ vc[g, pages[j // ps], j % ps]
    return out


def random_prefill(rng, c=7, hq=8, hkv=2, d=64, ps=16, num_pages=5, context=None):
    """A chunk of c tokens ending a context of `context` positions (default: random, at least c)
    over a heads-first cache with spare pages in shuffled order; entries past it are -1."""
    total = 2 * num_pages + 3
    n = int(rng.integers(c, num_pages * ps + 1)) if context is None else context
    idx = rng.permutation(total)[:num_pages].astype(np.int32)
    idx[np.arange(num_pages) * ps >= n] = -1
    return dict(query=rng.standard_normal((c, hq, d)), key_cache=rng.standard_normal((hkv, total, ps, d)),
                value_cache=rng.standard_normal((hkv, total, ps, d)), context_len=np.array([n], np.int32),
                page_indices=idx)


def unified_attention(queries, key_cache, value_cache, kv_lens, block_tables, query_start_loc, alibi_slopes=None,
                      qq_bias=None, softmax_aux=None, softmax_scale=None, sliding_window=None, logits_soft_cap=None):
    q, kc, vc = (np.asarray(a, np.float64) for a in (queries, key_cache, value_cache))
    lens, tables, starts = (np.asarray(a) for a in (kv_lens, block_tables, query_start_loc))
    hq, d = q.shape[1:]
    bs, hkv = kc.shape[1], kc.shape[2]
    scale = np.float32(1.0 / np.sqrt(d)) if softmax_scale is None else np.float32(softmax_scale)
    f32 = [None if a is None else np.asarray(a, np.float32).astype(np.float64) for a in (alibi_slopes, qq_bias,
                                                                                         softmax_aux)]
    slopes, qq, sinks = f32
    out = np.zeros_like(q)
    for s in range(len(lens)):
        n_q, n_kv = int(starts[s + 1] - starts[s]), int(lens[s])
        ctx = n_kv - n_q
        for i in range(n_q):
            t, pos = int(starts[s]) + i, ctx + i
            j = np.arange(0 if sliding_window is None else max(0, pos - sliding_window + 1), pos + 1)
            if j.size == 0:
                continue
            blocks, slots = tables[s, j // bs], j % bs
            for h in range(hq):
                g = h // (hq // hkv)
                x = (kc[blocks, slots, g] @ q[t, h]) * np.float64(scale)
                if slopes is not None:
                    x = x + slopes[h] * (j - ctx)
                if qq is not None and i < qq.shape[0]:
                    r = j - ctx
                    inside = (r >= 0) & (r < qq.shape[0])
                    x = x + np.where(inside, qq[i, np.clip(r, 0, qq.shape[0] - 1)], 0.0)
                if logits_soft_cap is not None:
                    cap = np.float64(np.float32(logits_soft_cap))
                    x = cap * np.tanh(x / cap)
                m = x.max() if sinks is None else max(x.max(), sinks[h])
                w = np.exp(x - m)
                den = w.sum() + (0.0 if sinks is None else np.exp(sinks[h] - m))
                out[t, h] = (w / den) @ vc[blocks, slots, g]
    return out


def random_unified(rng, bias=False, **kw):
    """random_problem's mixed batch as a token-major K and V cache pair, every table row a
    sequence (no num_seqs), with ALiBi slopes, a qq_bias and sinks when `bias`."""
    x = random_problem(rng, spare_rows=0, sinks=bias, **kw)
    kv = x["kv_pages"]
    out = dict(queries=x["queries"], key_cache=np.ascontiguousarray(kv[:, :, 0::2]),
               value_cache=np.ascontiguousarray(kv[:, :, 1::2]), kv_lens=x["context_lens"],
               block_tables=x["block_tables"], query_start_loc=x["query_start_loc"])
    if bias:
        hq = x["queries"].shape[1]
        out.update(alibi_slopes=rng.uniform(-0.3, 0.0, hq), qq_bias=rng.standard_normal((6, 6)),
                   softmax_aux=x["softmax_aux"])
    return out
