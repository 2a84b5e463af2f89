"""ragged_page_attention_v3, with ``ejkernel.modules.ragged_page_attention_v3``'s signature
(0.0.80.3): mixed prefill and decode that first writes this call's keys and values into the
paged cache, then attends over it.

The cache is ``[P, page_size, 2 * Hkv / pack, pack, align128(D)]`` (pack = 32 / bits: 1 for
float32, 2 for 16-bit types), K of kv head g at row 2g and V at 2g + 1 once the middle axes are
flattened: exactly ragged_page_attention_v2's ``[P, page_size, 2 * Hkv, D]`` layout, so the
attention is that op on a reshape of the cache (queries zero-padded to the cache's head dim,
which adds nothing to q.k). The write is one scatter of the framework's (in place in torch, and
in JAX where the caller donates the cache)."""
# The largest finite value of each cache dtype: q / q_scale is clipped to it before the cast.
_LARGEST = {"float32": 3.4028234663852886e38, "bfloat16": 3.3895313892515355e38, "float16": 65504.0}


def _xp(fw):
    if fw.name == "torch":
        import torch
        return torch
    import jax.numpy as jnp
    return jnp


def _pack(dtype_name):
    return {"float32": 1, "bfloat16": 2, "float16": 2}.get(dtype_name)


def _check_shapes(fw, q, k, v, cache, kv_lens, block_tables, qsl, distribution):
    t, hq, d = q.shape if q.ndim == 3 else (None, None, None)
    if q.ndim != 3:
        raise ValueError(f"queries: expected [T, Hq, D], got shape {tuple(q.shape)}")
    if k.ndim != 3 or k.shape[0] != t or k.shape[2] != d or hq % k.shape[1] != 0:
        raise ValueError(f"keys: expected [T, Hkv, D] with queries' T = {t}, D = {d} and Hkv dividing {hq}, got "
                         f"shape {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"values: expected keys' shape {tuple(k.shape)}, got {tuple(v.shape)}")
    pack = _pack(fw.dtype_name(cache))
    want = (2 * k.shape[1] // pack if pack else None, pack, -(-d // 128) * 128)
    if cache.ndim != 5 or pack is None or tuple(cache.shape[2:]) != want:
        raise ValueError(f"kv_cache: expected [P, page_size, {want[0]}, {want[1]}, {want[2]}] (2 * Hkv / pack, pack, "
                         f"D aligned to 128) in float32, bfloat16 or float16, got {fw.dtype_name(cache)} "
                         f"{tuple(cache.shape)}")
    s = kv_lens.shape[0] if kv_lens.ndim == 1 else None
    if s is None:
        raise ValueError(f"kv_lens: expected [max_num_seqs], got shape {tuple(kv_lens.shape)}")
    if block_tables.ndim != 1 or block_tables.shape[0] % s != 0:
        raise ValueError(f"block_tables: expected [max_num_seqs * pages_per_seq] (flattened) with max_num_seqs = {s}, "
                         f"got shape {tuple(block_tables.shape)}")
    if tuple(qsl.shape) != (s + 1,):
        raise ValueError(f"query_start_loc: expected [{s + 1}], got shape {tuple(qsl.shape)}")
    if tuple(distribution.shape) != (3,):
        raise ValueError(f"distribution: expected [3] (the number of sequences is its last), got shape "
                         f"{tuple(distribution.shape)}")


def _slots(fw, xp, kv_lens, block_tables, qsl, num_seqs, tokens, page_size, num_pages):
    """Each token's cache page and slot; tokens of no processed sequence get page num_pages (out
    of range: dropped by the write)."""
    if fw.name == "torch":
        t = xp.arange(tokens, device=qsl.device, dtype=qsl.dtype)
        seq = xp.searchsorted(qsl, t, right=True) - 1
    else:
        t = xp.arange(tokens, dtype=qsl.dtype)
        seq = xp.searchsorted(qsl, t, side="right") - 1
    s = kv_lens.shape[0]
    seq_c = xp.clip(seq, 0, s - 1)
    valid = (seq >= 0) & (seq < num_seqs) & (t < qsl[xp.clip(num_seqs, 0, s)])
    q_len = qsl[seq_c + 1] - qsl[seq_c]
    pos = kv_lens[seq_c] - q_len + (t - qsl[seq_c])
    valid = valid & (pos >= 0)
    pps = block_tables.shape[0] // s
    page = block_tables[seq_c * pps + xp.clip(pos // page_size, 0, pps - 1)]
    page = xp.where(valid, page, num_pages)
    return page, pos % page_size, valid


def _merged(fw, xp, k, v, cache):
    """[T, 2 * Hkv / pack, pack, Dpad]: K and V interleaved per kv head, D zero-padded."""
    t, hkv, d = k.shape
    kv = xp.stack([k, v], 2).reshape(t, 2 * hkv, d)
    pad = cache.shape[-1] - d
    if pad:
        kv = fw.pad_last(kv, cache.shape[-1])
    return kv.reshape(t, *cache.shape[2:])


def _write(fw, xp, cache, page, slot, valid, kv):
    if fw.name == "torch":
        cache[page[valid].long(), slot[valid].long()] = kv[valid].to(cache.dtype)
        return cache
    return cache.at[page, slot].set(kv.astype(cache.dtype), mode="drop")


def ragged_page_attention_v3(fw, queries, keys, values, kv_cache, kv_lens, block_tables, query_start_loc,
                             distribution, softmax_aux=None, /, *, softmax_scale=1.0, sliding_window=None,
                             logits_soft_cap=None, q_scale=None, k_scale=None, v_scale=None, vmem_limit_bytes=None,
                             platform=None, cfg=None, mesh=None, in_specs=None, out_specs=None):
    """Writes the new tokens' keys and values into the paged cache, then attends over it, as
    ``ejkernel.modules.ragged_page_attention_v3``{on}.

    Sequence s < distribution[2] owns tokens [query_start_loc[s], query_start_loc[s + 1]) and
    its first kv_lens[s] cache positions, this call's tokens the last of them: token i of n
    goes to position kv_lens[s] - n + i, at page block_tables[s * pages_per_seq + pos //
    page_size], slot pos % page_size, and sees the positions up to its own (causal,
    bottom-right), the sliding_window W newest when given. Logits softmax_scale * q.k (times
    q_scale and k_scale when given, q divided by q_scale and rounded to the cache's dtype first),
    soft-capped; softmax_aux adds one sink logit per query head to the denominator; the output
    is multiplied by v_scale. Float32 accumulation. (The seed's XLA path starts the window of
    every query of a chunk at kv_len - W, rounded down to its KV block, so early queries of a
    chunked prefill lose keys there; here each query's window is its own.)

    Args:
      queries: [T, Hq, D]; keys, values: [T, Hkv, D] (float32, bfloat16 or float16).
      kv_cache: [P, page_size, 2 * Hkv / pack, pack, align128(D)] (pack 1 for float32, 2 for
        16-bit types), as the seed's merge_kv packs it.
      kv_lens: int32 [max_num_seqs]; block_tables: int32 [max_num_seqs * pages_per_seq]
        (flattened); query_start_loc: int32 [max_num_seqs + 1]; distribution: int32 [3], its
        last the number of sequences processed (the seed's XLA path reads only that one).
      softmax_aux: sinks [Hq] (cast to float32) or None.
      softmax_scale: default 1.0, as the seed's.
      vmem_limit_bytes: a TPU knob, accepted and unused. platform ("auto" or None), cfg, mesh,
        in_specs, out_specs: None only.

    Returns:
      (out [T, Hq, D] in queries' dtype, the updated kv_cache); torch updates kv_cache in place
      and returns it.{no_gradient}
    """
    fw.refuse("ragged_page_attention_v3", platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    xp = _xp(fw)
    q, k, v = fw.array("queries", queries), fw.array("keys", keys), fw.array("values", values)
    cache = fw.array("kv_cache", kv_cache)
    kv_lens, bt = fw.array("kv_lens", kv_lens), fw.array("block_tables", block_tables)
    qsl, dist = fw.array("query_start_loc", query_start_loc), fw.array("distribution", distribution)
    _check_shapes(fw, q, k, v, cache, kv_lens, bt, qsl, dist)
    num_pages, page_size = cache.shape[0], cache.shape[1]
    page, slot, valid = _slots(fw, xp, kv_lens, bt, qsl, dist[2], q.shape[0], page_size, num_pages)
    cache = _write(fw, xp, cache, page, slot, valid, _merged(fw, xp, k, v, cache))

    scale = float(softmax_scale) * (1.0 if k_scale is None else float(k_scale))
    if q_scale is not None:
        q = q / q_scale
        top = _LARGEST[fw.dtype_name(cache)]
        q = fw.cast_float(xp.clip(q, -top, top), fw.dtype_name(cache))
        scale *= float(q_scale)
    d = q.shape[-1]
    if cache.shape[-1] != d:
        q = fw.pad_last(q, cache.shape[-1])
    pages = cache.reshape(num_pages, page_size, cache.shape[2] * cache.shape[3], cache.shape[4])
    tensors = dict(queries=q, kv_pages=pages, context_lens=kv_lens, block_tables=bt.reshape(kv_lens.shape[0], -1),
                   query_start_loc=qsl, num_seqs=dist[2:3])
    if softmax_aux is not None:
        tensors["softmax_aux"] = fw.cast_float(fw.array("softmax_aux", softmax_aux), "float32")
    out = fw.call("ragged_page_attention_v2", cfg=cfg, **tensors, softmax_scale=scale, logits_soft_cap=logits_soft_cap,
                  sliding_window=sliding_window)["out"]
    if cache.shape[-1] != d:
        out = out[..., :d]
    if v_scale is not None:
        out = fw.cast_float(out * v_scale, fw.dtype_name(out))
    return out, cache


WRAPPERS = (ragged_page_attention_v3,)
DOCS = {"jax": {}, "torch": {"on": ", on torch tensors"}}
