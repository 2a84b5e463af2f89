"""chunked_prefill_paged_decode, with ``ejkernel.modules.chunked_prefill_paged_decode``'s
signature: this call's keys and values written into the token-major paged caches, then
unified_attention (the ragged paged attention family) over them.

The write is one scatter of the framework's per cache, on the device from device-resident
metadata: in place in torch, and in JAX where the caller donates the caches (``jax.jit(...,
donate_argnums=(3, 4))``; otherwise XLA copies them first). Why not inside the kernel:
docs/design/decode_attention.md."""


def _xp(fw):
    if fw.name == "torch":
        import torch
        return torch
    import jax.numpy as jnp
    return jnp


def _check_shapes(q, k, v, key_cache, value_cache, kv_lens, block_tables, qsl):
    if q.ndim != 3:
        raise ValueError(f"queries: expected [T, Hq, D], got shape {tuple(q.shape)}")
    t, hq, d = q.shape
    if k.ndim != 3 or k.shape[0] != t or k.shape[2] != d or k.shape[1] < 1 or hq % k.shape[1] != 0:
        raise ValueError(f"keys: expected [T, Hkv, D] with queries' T = {t}, D = {d} and Hkv dividing {hq}, got "
                         f"shape {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"values: expected keys' shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if key_cache.ndim != 4 or tuple(key_cache.shape[2:]) != tuple(k.shape[1:]):
        raise ValueError(f"key_cache: expected [num_blocks, block_size, {k.shape[1]}, {d}], got shape "
                         f"{tuple(key_cache.shape)}")
    if tuple(value_cache.shape) != tuple(key_cache.shape):
        raise ValueError(f"value_cache: expected key_cache's shape {tuple(key_cache.shape)}, got "
                         f"{tuple(value_cache.shape)}")
    if kv_lens.ndim != 1:
        raise ValueError(f"kv_lens: expected [num_seqs], got shape {tuple(kv_lens.shape)}")
    s = kv_lens.shape[0]
    if block_tables.ndim != 2 or block_tables.shape[0] != s:
        raise ValueError(f"block_tables: expected [{s}, max_blocks_per_seq], got shape {tuple(block_tables.shape)}")
    if tuple(qsl.shape) != (s + 1,):
        raise ValueError(f"query_start_loc: expected [{s + 1}], got shape {tuple(qsl.shape)}")


def _rows(fw, xp, kv_lens, block_tables, qsl, tokens, block_size, num_blocks):
    """Each token's row of the caches viewed as [num_blocks * block_size, Hkv, D], and whether it
    belongs to a sequence: token i of sequence s's n goes to position kv_lens[s] - n + i."""
    if fw.name == "torch":
        t = xp.arange(tokens, device=qsl.device, dtype=qsl.dtype)
        seq = xp.searchsorted(qsl, t, right=True) - 1
    else:
        t = xp.arange(tokens, dtype=qsl.dtype)
        seq = xp.searchsorted(qsl, t, side="right") - 1
    s, mb = block_tables.shape
    seq_c = xp.clip(seq, 0, s - 1)
    pos = kv_lens[seq_c] - (qsl[seq_c + 1] - qsl[seq_c]) + (t - qsl[seq_c])
    valid = (seq >= 0) & (t < qsl[s]) & (pos >= 0) & (pos < mb * block_size)
    block = block_tables[seq_c, xp.clip(pos // block_size, 0, mb - 1)]
    valid = valid & (block >= 0) & (block < num_blocks)
    return block * block_size + pos % block_size, valid


def _write(fw, xp, cache, rows, valid, new):
    flat_shape = (cache.shape[0] * cache.shape[1],) + tuple(cache.shape[2:])
    if fw.name == "torch":
        cache.view(flat_shape)[rows[valid].long()] = new[valid].to(cache.dtype)
        return cache
    # Tokens of no sequence get an out-of-range row, which the scatter drops.
    rows = xp.where(valid, rows, flat_shape[0])
    return cache.reshape(flat_shape).at[rows].set(new.astype(cache.dtype), mode="drop").reshape(cache.shape)


def chunked_prefill_paged_decode(fw, queries, keys, values, key_cache, value_cache, kv_lens, block_tables,
                                 query_start_loc, alibi_slopes=None, softmax_aux=None, /, *, softmax_scale=None,
                                 causal=True, sliding_window=None, logits_soft_cap=None, seq_threshold_3d=None,
                                 num_par_softmax_segments=None, platform=None, mesh=None, in_specs=None,
                                 out_specs=None, cfg=None):
    """Writes this call's keys and values into the paged caches, then attends over them, as
    ``ejkernel.modules.chunked_prefill_paged_decode``{on}.

    Sequence s owns tokens [query_start_loc[s], query_start_loc[s + 1]) and its first kv_lens[s]
    cache positions, this call's tokens the last of them: token i of n goes to position
    kv_lens[s] - n + i, at key_cache[block_tables[s, pos // block_size], pos % block_size]
    (values alike), and sees the positions up to its own (causal; all kv_lens[s] with causal
    False, which the seed's XLA path refuses), none older than its sliding_window - 1 before
    when given. Logits softmax_scale * q.k + alibi_slopes[h] * (j - ctx) (ctx = kv_lens[s] - n),
    then cap * tanh(x / cap) when logits_soft_cap > 0; softmax_aux adds one sink logit per
    query head to the denominator. Accumulates in float32. This is unified_attention over the
    updated caches, as in the seed.

    Args:
      queries: [T, Hq, D]; keys, values: [T, Hkv, D] (float32, bfloat16 or float16).
      key_cache, value_cache: [num_blocks, block_size, Hkv, D], the caches' dtype (keys and
        values are cast to it).
      kv_lens: int32 [S], this call's tokens included; block_tables: int32 [S, max_blocks];
        query_start_loc: int32 [S + 1].
      alibi_slopes, softmax_aux: [Hq] (cast to float32), or None.
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      sliding_window: W (None or <= 0: none). logits_soft_cap: None or <= 0: none.
      seq_threshold_3d, num_par_softmax_segments: GPU launch knobs, accepted and unused.
      platform ("auto" or None), mesh, in_specs, out_specs, cfg: None only.

    Returns:
      (out [T, Hq, D] in queries' dtype, the updated key_cache, the updated value_cache);
      torch updates the caches in place and returns them.{no_gradient}
    """
    fw.refuse("chunked_prefill_paged_decode", platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    fw.scalar("causal", causal, "bool")
    xp = _xp(fw)
    q, k, v = fw.array("queries", queries), fw.array("keys", keys), fw.array("values", values)
    kc, vc = fw.array("key_cache", key_cache), fw.array("value_cache", value_cache)
    lens, bt, qsl = fw.array("kv_lens", kv_lens), fw.array("block_tables", block_tables), \
        fw.array("query_start_loc", query_start_loc)
    _check_shapes(q, k, v, kc, vc, lens, bt, qsl)
    rows, valid = _rows(fw, xp, lens, bt, qsl, q.shape[0], kc.shape[1], kc.shape[0])
    kc = _write(fw, xp, kc, rows, valid, k)
    vc = _write(fw, xp, vc, rows, valid, v)
    tensors = dict(queries=q, key_cache=kc, value_cache=vc, kv_lens=lens, block_tables=bt, query_start_loc=qsl)
    for name, x in (("alibi_slopes", alibi_slopes), ("softmax_aux", softmax_aux)):
        if x is not None:
            tensors[name] = fw.cast_float(fw.array(name, x), "float32")
    window = None if sliding_window is None or sliding_window <= 0 else sliding_window
    cap = None if logits_soft_cap is None or logits_soft_cap <= 0 else logits_soft_cap
    out = fw.call("unified_attention", cfg=cfg, **tensors, softmax_scale=softmax_scale, causal=bool(causal),
                  sliding_window=window, logits_soft_cap=cap)["out"]
    return out, kc, vc


WRAPPERS = (chunked_prefill_paged_decode,)
DOCS = {"jax": {}, "torch": {"on": ", on torch tensors"}}
