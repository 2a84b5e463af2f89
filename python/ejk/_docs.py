"""Docstrings the framework modules share: one description of each op's arguments, so ejk.jax and
ejk.torch cannot drift apart."""

_FLASH = '''Flash attention forward, as ``ejkernel.modules.flash_attention``{on}.

    Args:
      query: [B, Sq, Hq, D]; packed varlen (with cum_seqlens_q): [Tq, Hq, D] or [1, Tq, Hq, D].
      key, value: [B, Sk, Hkv, D] (varlen [Tk, Hkv, D] or [1, Tk, Hkv, D]); Hq a multiple of Hkv
        (GQA/MQA). float32, bfloat16 or float16, all three alike{devices}.
      attention_mask: not supported (NotImplementedError): use segment ids, causal,
        sliding_window, or a bias of 0 / -inf.
      bias: [B|1, Hq|1, Sq, Sk] in query's dtype, added to the scaled logits (not with varlen).
      q_segment_ids, kv_segment_ids: int32 [B, Sq] and [B, Sk], given together; a query sees only
        keys of its own segment; -1 is padding.
      cum_seqlens_q, cum_seqlens_k: int32 [N + 1], packed varlen: start of each sequence, from 0,
        ending at Tq (Tk).
      softmax_aux: float32 sinks, [S] shared by every head or [Hq, S]: logits that join the
        softmax denominator only.
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      dropout_prob: 0 only (NotImplementedError otherwise); dropout_seed is then unused.
      causal: key j is visible from query i only if j <= i (top-left aligned).
      sliding_window: int w, meaning (w, w), or (left, right): keys in [i - left, i + right].
      logits_soft_cap: cap > 0: logits become cap * tanh(logits / cap).
      normalize_output: False: the output is not divided by the softmax denominator.
      precision, logits_dtype: their defaults only (products are exact in the input dtype and
        accumulate in float32).
{sharding}
      max_seqlen_q, max_seqlen_k: varlen: the longest sequences (default: the packed totals).
      return_lse: also return lse.

    Returns:
      out [B, Sq, Hq, D] (query's shape and dtype); with return_lse, (out, lse) where lse is the
      float32 log-sum-exp (natural log) of each row, [B, Hq, Sq] (varlen [1, Hq, Tq]).{returns}
    '''


def flash_attention(on="", devices="", sharding="", returns=""):
    """flash_attention's docstring; `sharding`: the lines on platform, cfg, mesh and specs."""
    return _FLASH.format(on=on, devices=devices, sharding=sharding.rstrip("\n"), returns=returns)


_MEAN_POOLING = """Mean over the token axis, as ``ejkernel.modules.mean_pooling``; differentiable.

    Args:
      x: [B, T, D] (float32, bfloat16 or float16); packed varlen: [total_tokens, D].
      cu_seqlens: int32 [N + 1], packed varlen: start of each sequence, from 0, ending at
        total_tokens.
      chunk_size: a tiling knob of ejkernel's Triton kernel; unused here, as in its XLA one.
      platform ("auto" or None), cfg: None only.

    Returns:
      [B, D] (varlen [N, D]) in x's dtype, summed in float32; a sequence without tokens gives 0.{returns}
    """

_MERGE = """Merges two partial attention results by their log-sum-exp (split-KV, cascade, ring).

    Args:
      out_a, out_b: [..., T, H, D] (float32, bfloat16 or float16), any number of leading dims.
      lse_a, lse_b: float32 [..., H, T], natural log; -inf: that part saw no key.

    Returns:
      (out, lse): out [..., T, H, D] in out_a's dtype and lse [..., H, T]; where both LSEs are
      -inf, out is 0 and lse -inf.{returns}
    """


def mean_pooling(returns=""):
    return _MEAN_POOLING.format(returns=returns)


def merge_attention_states(returns=""):
    return _MERGE.format(returns=returns)
