"""unified_attention, with ``ejkernel.modules.unified_attention``'s signature (vLLM-style mixed
prefill and decode over a token-major paged cache)."""


def unified_attention(fw, queries, key_cache, value_cache, kv_lens, block_tables, query_start_loc, alibi_slopes=None,
                      qq_bias=None, softmax_aux=None, /, *, softmax_scale=None, causal=True, sliding_window=None,
                      logits_soft_cap=None, seq_threshold_3d=None, platform=None, mesh=None, in_specs=None,
                      out_specs=None, cfg=None):
    """Unified paged attention, as ``ejkernel.modules.unified_attention``.

    Sequence s owns query tokens [query_start_loc[s], query_start_loc[s + 1]) and its first
    kv_lens[s] cache positions, position j of kv head g at key_cache[block_tables[s, j //
    block_size], j % block_size, g] (values alike; query head h reads kv head h // (Hq // Hkv)).
    Query i of n_q sits at ctx + i, ctx = kv_lens[s] - n_q, and sees the positions up to its own
    (all kv_lens[s] with causal False), none older than its W - 1 before with sliding_window W > 0. Logits softmax_scale * q.k + alibi_slopes[h] *
    (j - ctx) + qq_bias[i, j - ctx] (where both indices are below qq_bias' size), then
    cap * tanh(x / cap) when logits_soft_cap > 0; softmax_aux adds a sink per head to the
    denominator. Accumulates in float32.

    Args:
      queries: [T, Hq, D] (float32, bfloat16 or float16).
      key_cache, value_cache: [num_blocks, block_size, Hkv, D], queries' dtype.
      kv_lens: int32 [S]; block_tables: int32 [S, max_blocks]; query_start_loc: int32 [S + 1].
      alibi_slopes: [Hq]; qq_bias: [NQ, NQ]; softmax_aux: [Hq] (any float dtype, cast to
        float32), or None.
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      causal: False: every query also sees its sequence's later positions (the seed's XLA path
        refuses False).
      sliding_window: W (None or <= 0: every position up to the query's).
      logits_soft_cap: the soft cap (None or <= 0: none).
      seq_threshold_3d: a GPU launch knob, accepted and unused.
      platform ("auto" or None), mesh, in_specs, out_specs, cfg: None only.

    Returns:
      [T, Hq, D] in queries' dtype.{no_gradient}
    """
    fw.refuse("unified_attention", platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    tensors = {name: fw.array(name, x) for name, x in
               (("queries", queries), ("key_cache", key_cache), ("value_cache", value_cache), ("kv_lens", kv_lens),
                ("block_tables", block_tables), ("query_start_loc", query_start_loc))}
    for name, x in (("alibi_slopes", alibi_slopes), ("qq_bias", qq_bias), ("softmax_aux", softmax_aux)):
        if x is not None:
            tensors[name] = fw.cast_float(fw.array(name, x), "float32")
    # The seed's "off" values: a window or cap of 0 (or less) is none.
    window = None if sliding_window is None or sliding_window <= 0 else sliding_window
    cap = None if logits_soft_cap is None or logits_soft_cap <= 0 else logits_soft_cap
    result = fw.call("unified_attention", cfg=cfg, **tensors, softmax_scale=softmax_scale, causal=causal,
                     logits_soft_cap=cap, sliding_window=window)
    return result["out"]


WRAPPERS = (unified_attention,)
