"""prefill_page_attention, with ``ejkernel.modules.prefill_page_attention``'s signature (one
sequence's chunk over a heads-first paged cache)."""


def prefill_page_attention(fw, query, key_cache, value_cache, context_len, page_indices, /, *, softmax_scale=None,
                           mask_value=-2.381976426469702e38, attn_logits_soft_cap=None, sliding_window=None,
                           platform=None, cfg=None):
    """Prefill attention of one chunk over a paged cache, as ``ejkernel.modules.prefill_page_attention``.

    The chunk's C query tokens belong to a sequence of context_len cache positions (the chunk
    included); position j of kv head g is key_cache[g, page_indices[j // page_size],
    j % page_size] (query head h reads kv head h // (Hq // Hkv)). Query i sits at position
    context_len - C + i and sees the positions up to its own, the sliding_window W newest of
    them when given. Logits softmax_scale * q.k, then cap * tanh(x / cap) with a soft cap. A
    query that sees nothing (context_len < C) gets 0 (the seed averages every gathered value).

    Args:
      query: [C, Hq, D] (float32, bfloat16 or float16).
      key_cache, value_cache: [Hkv, total_num_pages, page_size, D], query's dtype.
      context_len: int32 [1] (or 0-d), at most num_pages * page_size.
      page_indices: int32 [num_pages]; entries no query reaches are not read.
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      mask_value: accepted and unused: masked positions are left out of the softmax exactly.
      attn_logits_soft_cap: the soft cap (default none).
      sliding_window: W (default: every position up to the query's).
      platform ("auto" or None), cfg: None only.

    Returns:
      [C, Hq, D] in query's dtype.{no_gradient}
    """
    fw.refuse("prefill_page_attention", platform=platform not in (None, "auto"))
    fw.scalar("mask_value", mask_value, "f32")
    tensors = {name: fw.array(name, x) for name, x in
               (("query", query), ("key_cache", key_cache), ("value_cache", value_cache),
                ("page_indices", page_indices))}
    tensors["context_len"] = fw.array("context_len", context_len).reshape(1)
    result = fw.call("prefill_page_attention", cfg=cfg, **tensors, softmax_scale=softmax_scale,
                     attn_logits_soft_cap=attn_logits_soft_cap, sliding_window=sliding_window)
    return result["out"]


WRAPPERS = (prefill_page_attention,)
