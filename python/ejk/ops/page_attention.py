"""page_attention, with ``ejkernel.modules.page_attention``'s signature (decode over a paged KV
cache)."""


def page_attention(fw, query, key_cache, value_cache, context_lens, block_tables, /, *, attn_scale=None,
                   max_context_len=None, num_splits=0, mask_value=-2.381976426469702e38, attn_logits_soft_cap=None,
                   pages_per_compute_block=None, megacore_mode=None, inline_seq_dim=True, sliding_window=None,
                   platform=None, cfg=None):
    """Decode attention over a paged KV cache, as ``ejkernel.modules.page_attention``.

    Sequence s has one query token per head and attends to its first
    n = min(context_lens[s], max_context_len) cache positions; position j of kv head g is
    key_cache[block_tables[s, j // block_size], g, j % block_size] (query head h reads kv head
    h // (Hq // Hkv)). Logits attn_scale * q.k, then cap * tanh(x / cap) with a soft cap; a
    sliding_window W keeps the W newest positions. A sequence with no visible position gets 0.

    Args:
      query: [S, Hq, D] (float32, bfloat16 or float16).
      key_cache, value_cache: [num_blocks, Hkv, block_size, D], query's dtype.
      context_lens: int32 [S], each at most max_blocks * block_size.
      block_tables: int32 [S, max_blocks]; entries outside a sequence's visible positions (past its
        context, before its window) are not read.
      attn_scale: multiplies q.k (default 1/sqrt(D)).
      max_context_len: a cap on every context length.
      num_splits: split-KV parts per sequence on a GPU (0: chosen by the op; 1: none).
      mask_value: accepted and unused: masked positions are left out of the softmax exactly.
      attn_logits_soft_cap: the soft cap (default none).
      pages_per_compute_block, megacore_mode: TPU tiling knobs, accepted and unused.
      inline_seq_dim: True only.
      sliding_window: W, the newest positions each sequence sees (default all).
      platform ("auto" or None), cfg: None only.

    Returns:
      [S, Hq, D] in query's dtype.{no_gradient}
    """
    fw.refuse("page_attention", platform=platform not in (None, "auto"),
              inline_seq_dim=inline_seq_dim is not True)
    fw.scalar("mask_value", mask_value, "f32")
    tensors = {name: fw.array(name, x) for name, x in
               (("query", query), ("key_cache", key_cache), ("value_cache", value_cache),
                ("context_lens", context_lens), ("block_tables", block_tables))}
    result = fw.call("page_attention", cfg=cfg, **tensors, attn_scale=attn_scale, max_context_len=max_context_len,
                     num_splits=num_splits, attn_logits_soft_cap=attn_logits_soft_cap, sliding_window=sliding_window)
    return result["out"]


WRAPPERS = (page_attention,)
