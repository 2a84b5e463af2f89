"""decode_attention, with ``ejkernel.modules.decode_attention``'s signature (sglang-style paged
decode over a flat token-major buffer, returning the log-sum-exp too)."""


def decode_attention(fw, query, key_buffer, value_buffer, req_to_tokens, seq_lens, /, *, softmax_scale=None,
                     num_kv_splits=None, page_size=1, logits_soft_cap=None, platform=None, mesh=None, in_specs=None,
                     out_specs=None, cfg=None):
    """Paged decode attention, as ``ejkernel.modules.decode_attention``.

    Sequence b has one query token per head and attends to its first seq_lens[b] positions;
    position j of kv head g is row req_to_tokens[b, j // page_size] * page_size + j % page_size
    of key_buffer (values alike; query head h reads kv head h // (Hq // Hkv)). Logits
    softmax_scale * q.k, then cap * tanh(x / cap) when logits_soft_cap > 0; softmax in float32.
    An empty context gives output 0 and lse -inf.

    Args:
      query: [B, Hq, D] (float32, bfloat16 or float16).
      key_buffer, value_buffer: [total_tokens, Hkv, D], query's dtype; total_tokens a multiple
        of page_size.
      req_to_tokens: int32 [B, max_pages]; entries past a sequence's context are not read.
      seq_lens: int32 [B], each at most max_pages * page_size.
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      num_kv_splits: a GPU split-KV knob of the seed's Triton kernel, accepted and unused.
      page_size: positions per page (default 1, as the seed's).
      logits_soft_cap: the soft cap (None or <= 0: none).
      platform ("auto" or None), mesh, in_specs, out_specs, cfg: None only.

    Returns:
      (out [B, Hq, D] in query's dtype, lse [B, Hq] float32: the natural log of each row's
      softmax denominator).{no_gradient}
    """
    fw.refuse("decode_attention", platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    if num_kv_splits is not None:
        fw.scalar("num_kv_splits", num_kv_splits, "i64")
    tensors = {name: fw.array(name, x) for name, x in
               (("query", query), ("key_buffer", key_buffer), ("value_buffer", value_buffer),
                ("req_to_tokens", req_to_tokens), ("seq_lens", seq_lens))}
    cap = None if logits_soft_cap is None or logits_soft_cap <= 0 else logits_soft_cap
    result = fw.call("decode_attention", cfg=cfg, **tensors, softmax_scale=softmax_scale, page_size=page_size,
                     logits_soft_cap=cap)
    return result["out"], result["lse"]


WRAPPERS = (decode_attention,)
