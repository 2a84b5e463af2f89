"""ragged_decode_attention, with ``ejkernel.modules.ragged_decode_attention``'s signature
(0.0.80.3): one decode step per sequence over a dense KV cache, sequence b seeing keys
[sequence_start[b], sequence_end[b]) (and a window around its position sequence_end[b] - 1).

It runs as one flash_attention call: the query heads of each GQA group become the queries of
one kv head (all of a group see the same keys), so each K/V tile is read once per kv head, and
the visible range becomes key segment ids (-1 outside it). Per-query-head sinks of a group
larger than one keep the query heads as heads instead (one query each)."""


def _xp(fw):
    if fw.name == "torch":
        import torch
        return torch
    import jax.numpy as jnp
    return jnp


def _int32(fw, x):
    if fw.name == "torch":
        import torch
        return x.to(torch.int32)
    import jax.numpy as jnp
    return x.astype(jnp.int32)


def _key_segments(fw, xp, start, end, seq_len, sliding_window, like):
    """int32 [B, S]: 0 where the key is visible from the query at end - 1, else -1."""
    if fw.name == "torch":
        j = xp.arange(seq_len, device=like.device)[None, :]
    else:
        j = xp.arange(seq_len)[None, :]
    start, end = start[:, None], end[:, None]
    visible = (j >= start) & (j < end)
    if sliding_window is not None:
        left, right = sliding_window
        visible = visible & (j >= end - 1 - left) & (j <= end - 1 + right)
    return _int32(fw, xp.where(visible, 0, -1))


def _window(sliding_window):
    if sliding_window is None:
        return None
    if (not isinstance(sliding_window, (tuple, list)) or len(sliding_window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in sliding_window)):
        raise ValueError(f"sliding_window: expected (left, right), two ints >= 0, got {sliding_window!r}")
    return tuple(sliding_window)


def _check_shapes(q, k, v, start, end):
    if q.ndim != 3:
        raise ValueError(f"query: expected [B, Hq, D] or [B, 1, Hq, D], got shape {tuple(q.shape)}")
    b, hq, d = q.shape
    if k.ndim != 4 or k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"key: expected [B, S, Hkv, D] with query's B = {b} and D = {d}, got shape {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"value: expected key's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if hq % k.shape[2] != 0:
        raise ValueError(f"query: its {hq} heads are not a multiple of key's {k.shape[2]} kv heads")
    for name, x in (("sequence_start", start), ("sequence_end", end)):
        if x.ndim != 1 or x.shape[0] != b:
            raise ValueError(f"{name}: expected [B] = [{b}], got shape {tuple(x.shape)}")


def _sinks(aux, hq, hkv):
    """The seed's sink shapes: [N] shared, [Hkv, N] per kv head, [Hq, N] per query head; as
    (sinks, per_query_head)."""
    if aux.ndim == 1:
        return aux, False
    if aux.ndim == 2 and aux.shape[0] == hkv:
        return aux, False
    if aux.ndim == 2 and aux.shape[0] == hq:
        return aux, True
    raise ValueError(f"softmax_aux: expected [N], [{hkv}, N] (per kv head) or [{hq}, N] (per query head), got shape "
                     f"{tuple(aux.shape)}")


def ragged_decode_attention(fw, query, key, value, sequence_start, sequence_end, softmax_aux=None, /, *,
                            softmax_scale=None, sliding_window=None, logits_soft_cap=None, platform=None, cfg=None,
                            mesh=None, in_specs=None, out_specs=None):
    """Decode attention over a dense KV cache with a ragged valid range per sequence, as
    ``ejkernel.modules.ragged_decode_attention``{on}.

    Args:
      query: [B, Hq, D] or [B, 1, Hq, D], one token per sequence (float32, bfloat16 or float16).
      key, value: [B, S, Hkv, D], query's dtype; Hq a multiple of Hkv (GQA, MQA).
      sequence_start, sequence_end: int [B]: sequence b sees keys j with start <= j < end; its
        query sits at position end - 1.
      softmax_aux: sink logits, in the softmax's denominator with no value: [N] shared, [Hkv, N]
        per kv head or [Hq, N] per query head (float32).
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      sliding_window: (left, right): also only keys in [end - 1 - left, end - 1 + right].
      logits_soft_cap: cap > 0: logits become cap * tanh(logits / cap).
      platform ("auto" or None), mesh, in_specs, out_specs: None only.
      cfg: the flash_attention call's tuning values (e.g. dict(block_q=32)), or None.

    Returns:
      out, query's shape and dtype; a sequence with no visible key (and no sinks) gives zeros.
    """
    fw.refuse("ragged_decode_attention", platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    xp = _xp(fw)
    q, k, v = fw.array("query", query), fw.array("key", key), fw.array("value", value)
    start, end = fw.array("sequence_start", sequence_start), fw.array("sequence_end", sequence_end)
    shape = tuple(q.shape)
    if q.ndim == 4 and q.shape[1] == 1:
        q = q[:, 0]
    _check_shapes(q, k, v, start, end)
    b, hq, d = q.shape
    hkv = k.shape[2]
    aux, per_query_head = (None, False) if softmax_aux is None else _sinks(
        fw.cast_float(fw.array("softmax_aux", softmax_aux), "float32"), hq, hkv)
    kv_seg = _key_segments(fw, xp, start, end, k.shape[1], _window(sliding_window), k)
    if per_query_head and hq != hkv:
        queries = q[:, None]  # [B, 1, Hq, D]: the query heads stay heads
    else:
        queries = q.reshape(b, hkv, hq // hkv, d).permute(0, 2, 1, 3) if fw.name == "torch" else \
            q.reshape(b, hkv, hq // hkv, d).transpose(0, 2, 1, 3)  # [B, group, Hkv, D]
    q_seg = _int32(fw, xp.zeros(queries.shape[:2], dtype=kv_seg.dtype) if fw.name != "torch"
                   else xp.zeros(queries.shape[:2], dtype=kv_seg.dtype, device=kv_seg.device))
    out = fw.call("flash_attention", cfg=cfg, q=queries, k=k, v=v, q_segment_ids=q_seg, kv_segment_ids=kv_seg,
                  softmax_aux=aux, softmax_scale=softmax_scale, logits_soft_cap=logits_soft_cap)["out"]
    if queries.shape[1] == 1 and queries.shape[2] == hq:
        out = out[:, 0]
    else:
        out = out.permute(0, 2, 1, 3) if fw.name == "torch" else out.transpose(0, 2, 1, 3)
        out = out.reshape(b, hq, d)
    return out.reshape(shape)


WRAPPERS = (ragged_decode_attention,)
DOCS = {"jax": {}, "torch": {"on": ", on torch tensors"}}
