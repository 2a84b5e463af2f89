"""blocksparse_attention, with ``ejkernel.modules.blocksparse_attention``'s signature (0.0.80.3):
the seed's BHSD layout and defaults (``causal=True``), its MaskInfo lowered to segment ids, a
causal flag and a window, its sinks normalized as its XLA code does, and the block layout taken
as a boolean array through ``qkv_layouts`` (the seed's Triton ``SparseMask`` has no meaning
here); differentiable through blocksparse_attention_backward from the saved out and lse."""
from .. import _kit
from .flash_attention import _band


def blocksparse_attention(fw, query, key, value, softmax_aux=None, bias=None, *, mask_info=None,
                          attention_mask=None, sequence_parallelism_mesh_axis_name=None, logits_soft_cap=None,
                          qkv_layouts=None, softmax_scale=None, mask_builder=None, sliding_window=None,
                          chunk_size=None, causal=True, fused_backward=False, purify=False, platform=None, cfg=None,
                          mesh=None, in_specs=None, out_specs=None):
    """Block-sparse attention, as ``ejkernel.modules.blocksparse_attention``{on}.

    Args:
      query: [B, Hq, Sq, D]; key, value: [B, Hkv, Sk, D] (BHSD), Hq a multiple of Hkv;
        float32, bfloat16 or float16, all three alike.
      softmax_aux: sinks, normalized as the seed's XLA code does: [Hq] or [Hkv] (one per head),
        another 1-D length (shared by every head), [Hq, S] or [Hkv, S]; cast to float32.
      bias: not supported (NotImplementedError; the seed's XLA code raises too).
      mask_info: an ``ejk.types.MaskInfo`` (or ``ejk.types.torch.MaskInfo``): its segment ids and
        band become the kernel's segment ids, causal flag and window (a dense term:
        NotImplementedError). Causal and window count positions by index (the seed's positions
        within a segment give the same mask when q and kv share the segment layout).
      attention_mask: [B, Sk], a key padding mask (as the seed's XLA code reads a 2-D one, which
        its type check refuses); a dense 3-D or 4-D mask is NotImplementedError (pass the layout
        through qkv_layouts and segments through mask_info).
      qkv_layouts: the block layout: a boolean (or integer) array [B|1, Hq|1, NQ, NK], True where
        query block i may see key block j, NQ = ceil(Sq / q block), NK = ceil(Sk / kv block);
        or a 1-tuple holding it. None: every block.
      chunk_size: the layout's block sizes: an int for both or (q_block, kv_block), multiples of
        16 (default 64).
      causal: key j is visible from query i only if j <= i (top-left). Default True (the seed's).
      sliding_window: int w, meaning (w, w), or (left, right): keys in [i - left, i + right].
      logits_soft_cap: cap > 0: logits become cap * tanh(logits / cap).
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      fused_backward: accepted, either value: the one backward computes the same gradients.
      purify: rows whose query segment id is < 0 are 0 anyway (they see nothing).
      mask_builder, sequence_parallelism_mesh_axis_name, mesh, in_specs, out_specs: not supported
        (NotImplementedError).
      platform: None or "auto" (where query is), "cpu", "cuda". On CUDA, chunk_size's q block
        is a multiple of 64 (and for gradients its kv block too).
      cfg: None, or a mapping of tuning axes (block_q, block_k: tiles that divide the layout's
        blocks).

    Returns:
      out [B, Hq, Sq, D] (query's shape and dtype); a query with no visible key gives 0.
      Differentiable (blocksparse_attention_backward from the saved out and lse): gradients reach
      query, key, value and softmax_aux.
    """
    fw.refuse("blocksparse_attention", bias=bias is not None, mask_builder=mask_builder is not None,
              sequence_parallelism_mesh_axis_name=sequence_parallelism_mesh_axis_name is not None,
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    fw.scalar("fused_backward", fused_backward, "bool")
    fw.scalar("purify", purify, "bool")
    tensors = {"q": fw.array("query", query), "k": fw.array("key", key), "v": fw.array("value", value)}
    fw.on_platform("blocksparse_attention", _kit.platform(platform), tensors["q"])
    q, k = tensors["q"], tensors["k"]
    if q.ndim != 4 or k.ndim != 4:
        raise ValueError(f"query, key: expected [B, H, S, D] arrays (BHSD), got shapes {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    scalars = dict(softmax_scale=softmax_scale, causal=fw.scalar("causal", causal, "bool"),
                   sliding_window=sliding_window, logits_soft_cap=logits_soft_cap)
    scalars["q_blocksize"], scalars["kv_blocksize"] = _block_sizes(chunk_size)
    if softmax_aux is not None:
        tensors["softmax_aux"] = _sinks(fw, fw.array("softmax_aux", softmax_aux), q.shape[1], k.shape[1])
    layout = qkv_layouts[0] if isinstance(qkv_layouts, (tuple, list)) and len(qkv_layouts) == 1 else qkv_layouts
    if layout is not None:
        tensors["block_mask"] = _as_u8(fw, fw.array("qkv_layouts", layout))
    if mask_info is not None:
        _lower(fw, mask_info, tensors, scalars)
    if attention_mask is not None:
        _key_padding(fw, fw.array("attention_mask", attention_mask), tensors)
    return fw.call("blocksparse_attention", cfg=cfg, **tensors, **scalars)["out"]


def _block_sizes(chunk_size):
    if chunk_size is None:
        return 64, 64
    if isinstance(chunk_size, (tuple, list)) and len(chunk_size) == 2:
        return tuple(_kit.scalar("chunk_size", c, "i64") for c in chunk_size)
    c = _kit.scalar("chunk_size", chunk_size, "i64")
    return c, c


def _xp(fw):
    """The array library of the framework: jax.numpy or torch."""
    if fw.name == "jax":
        import jax.numpy as jnp
        return jnp
    import torch
    return torch


def _as_u8(fw, x):
    xp = _xp(fw)
    return (x != 0).astype(xp.uint8) if fw.name == "jax" else (x != 0).to(xp.uint8)


def _sinks(fw, aux, heads, kv_heads):
    """The seed's normalization (_normalize_softmax_aux): [Hq, S] float32."""
    aux = fw.cast_float(aux, "float32")
    if aux.ndim == 1:
        if aux.shape[0] in (heads, kv_heads):
            aux = aux[:, None]
        else:
            return aux  # [S]: shared by every head, as the op takes it
    if aux.ndim != 2:
        raise ValueError(f"softmax_aux: expected 1-D or 2-D sinks, got shape {tuple(aux.shape)}")
    if aux.shape[0] == heads:
        return aux
    if aux.shape[0] != kv_heads:
        raise ValueError(f"softmax_aux: first dim must be num_kv_heads ({kv_heads}) or num_heads ({heads}); got "
                         f"{aux.shape[0]}")
    group = heads // kv_heads
    xp = _xp(fw)
    # Each kv head's sinks repeated for the query heads of its group (jnp.repeat's order).
    return xp.repeat(aux, group, axis=0) if fw.name == "jax" else aux.repeat_interleave(group, dim=0)


def _lower(fw, mask_info, tensors, scalars):
    """mask_info as segment ids and a band, merged into tensors and scalars."""
    lowered = _kit.lower_mask_info(mask_info)
    if lowered.attention_mask is not None:
        raise NotImplementedError("mask_info: a dense term (a 3-D/4-D mask, per-batch offsets, decode/prefill slices, "
                                  "a union of token types) is not supported by blocksparse_attention in ejkernel "
                                  "(C++): give segment ids, causal and window only")
    if lowered.q_segment_ids is not None:
        tensors["q_segment_ids"] = fw.adopt(lowered.q_segment_ids, tensors["q"])
        tensors["kv_segment_ids"] = fw.adopt(lowered.kv_segment_ids, tensors["q"])
    if lowered.band != (None, None):
        scalars["causal"], scalars["sliding_window"] = _band(lowered.band, scalars["causal"],
                                                             scalars["sliding_window"], tensors["k"].shape[2])


def _key_padding(fw, mask, tensors):
    """A 2-D [B, Sk] attention_mask as key segment ids of -1 where it is False."""
    if mask.ndim != 2:
        raise NotImplementedError(f"attention_mask: a dense [B, ..., Sq, Sk] mask (shape {tuple(mask.shape)}) is not "
                                  "supported by ejkernel (C++); pass a [B, Sk] key padding mask, mask_info or "
                                  "qkv_layouts")
    xp = _xp(fw)
    q = tensors["q"]
    b, sq = q.shape[0], q.shape[2]
    if "kv_segment_ids" not in tensors:
        if fw.name == "jax":
            tensors["q_segment_ids"] = xp.zeros((b, sq), xp.int32)
            tensors["kv_segment_ids"] = xp.zeros(mask.shape, xp.int32)
        else:
            tensors["q_segment_ids"] = xp.zeros((b, sq), dtype=xp.int32, device=q.device)
            tensors["kv_segment_ids"] = xp.zeros(tuple(mask.shape), dtype=xp.int32, device=q.device)
    kv = tensors["kv_segment_ids"]
    tensors["kv_segment_ids"] = xp.where(mask != 0, kv, -xp.ones_like(kv))


WRAPPERS = (blocksparse_attention,)

DOCS = {"torch": {"on": ", on torch tensors"}}

# Each differentiable input and its gradient among the backward op's outputs (the layout and
# segment ids are integers: no gradient).
_GRADIENT_OF = {"q": "dq", "k": "dk", "v": "dv", "softmax_aux": "dsoftmax_aux"}


def _backward(call, shape, inputs, scalars, grads, outputs):
    """blocksparse_attention_backward on the forward's inputs, its saved out and lse, and the
    gradients of out and lse; the gradients of the inputs given."""
    result = call("blocksparse_attention_backward", **inputs, **scalars, out=outputs["out"], lse=outputs["lse"],
                  d_out=grads["out"], d_lse=grads.get("lse"))
    return {name: result[d] for name, d in _GRADIENT_OF.items() if name in inputs}


_backward.uses_outputs = True  # out and lse are saved by the forward, never recomputed
GRADIENTS = {"blocksparse_attention": _backward}
