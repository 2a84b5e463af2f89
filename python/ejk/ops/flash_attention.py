"""flash_attention, with ``ejkernel.modules.flash_attention``'s signature (0.0.80.3): the seed's
argument names, order and defaults, its MaskInfo (``mask_info=``) lowered to the kernel's segment
ids, causal flag and window, what ejkernel (C++) lacks refused by name, and (JAX) its shard_map
wrapper. ``flash_attention_with_lse`` (ours) also returns the log-sum-exp and takes segment ids
and varlen bounds directly."""
from .. import _kit
from . import _varlen_mask

# The operands under shard_map: the seed's seven in_specs, then what mask_info's shardings give
# (its segment ids and its dense mask; the block_tables slot has no operand here).
_SPEC_ORDER = ("query", "key", "value", "bias", "softmax_aux", "cum_seqlens_q", "cum_seqlens_k",
               "q_segment_ids", "kv_segment_ids", "attention_mask")
_SEED_SPECS = 7
_SPEC_NAMES = {"q": "query", "k": "key", "v": "value"}
_DEFAULT = _kit.FRAMEWORK_DEFAULT


def flash_attention(fw, query, key, value, bias=None, cum_seqlens_q=None, cum_seqlens_k=None, softmax_aux=None,
                    block_tables=None, /, *, mask_info=None, softmax_scale=None, dropout_prob=0.0, causal=False,
                    dropout_seed=None, sliding_window=None, logits_soft_cap=None, normalize_output=True,
                    precision=_DEFAULT, logits_dtype=_DEFAULT, platform=None, cfg=None, mesh=None, in_specs=None,
                    out_specs=None):
    """Flash attention forward, as ``ejkernel.modules.flash_attention``{on}.

    Args:
      query: [B, Sq, Hq, D]; packed varlen (with cum_seqlens_q): [Tq, Hq, D] or [1, Tq, Hq, D].
      key, value: [B, Sk, Hkv, D] (varlen [Tk, Hkv, D] or [1, Tk, Hkv, D]); Hq a multiple of Hkv
        (GQA/MQA). float32, bfloat16 or float16, all three alike{devices}. A head_dim the
        kernels do not tile (not a multiple of 8; of 16 on CUDA) is zero-padded, exactly.
      bias: [B|1, Hq|1, Sq, Sk], any float dtype (cast to query's), added to the scaled logits
        (not with varlen).
      cum_seqlens_q, cum_seqlens_k: int32 [N + 1], packed varlen: start of each sequence, from 0,
        ending at Tq (Tk).
      softmax_aux: sinks, any float dtype (cast to float32), [S] shared by every head or
        [Hq, S]: logits that join the softmax denominator only.
      block_tables: int32 [B, max_blocks], paged K/V: key and value are then caches
        [num_blocks, block_size, Hkv, D] and batch b's keys are the pages block_tables[b] in order
        (Sk = max_blocks * block_size, every slot a key; ids in [0, num_blocks), unchecked on
        the device). They are gathered into [B, Sk, Hkv, D] before the kernel, one more pass
        over the keys read; differentiable (the gradient scatters back into the pages). Not with
        varlen (as the seed).
      mask_info: an ``ejk.types.MaskInfo`` (or ``ejk.types.torch.MaskInfo``, the same on torch
        tensors): its segment ids, causal offset, window and chunks become the kernel's segment
        ids, causal flag and window; a dense term that is a segment mask and concrete (not
        traced) becomes segment ids too, any other (a 3-D/4-D mask, per-batch offsets,
        decode/prefill slices, token types; or one under tracing) is read by the kernel's
        mask-reading variant as a uint8 [B|1, Hq|1, Sq, Sk] (on CUDA its gradient takes no
        bias). Query rows whose segment id is -1, or that see no key, give 0. With packed
        varlen: a MaskInfo over the packed tokens, shape (1, Tq, Tk), ANDed with each
        sequence's own keys and causal / sliding_window within the sequence; run as one dense
        call over every packed pair (ops/_varlen_mask.py; no dropout, no bias, no mesh).
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      dropout_prob: p in [0, 1): each attention weight is dropped with probability p and the
        kept ones are scaled by 1 / (1 - p); the softmax denominator does not see dropout. The
        keep decision of (batch, head, query, key) is Philox 4x32-10 of dropout_seed and those
        coordinates (varlen: the sequence's index and positions within it), the same on every
        backend, block size and run (kernels/ejk/kernels/common/philox.h).
      dropout_seed: an int in [-2^63, 2^64) (None: 0), the Philox key; the gradient uses the same.
      causal: key j is visible from query i only if j <= i (top-left aligned).
      sliding_window: int w, meaning (w, w), or (left, right): keys in [i - left, i + right].
      logits_soft_cap: cap > 0: logits become cap * tanh(logits / cap).
      normalize_output: False: the output is not divided by the softmax denominator.
      precision, logits_dtype: any; products are exact in the input dtype and logits stay
        float32, as precise as any setting asks.
      platform: None or "auto" (where the arrays are), "cpu", "cuda"; the seed's "xla" is
        "auto", its "triton", "cute" and "tilelang" are "cuda"; "pallas" is refused.
      cfg: None (an ejk.ops.overlay_cache's value for flash_attention, else the tuning store's
        winner, else the spec's heuristic), or a mapping of tuning axes to ints, e.g.
        dict(block_q=64, block_k=128): used as given, never overridden. The gradient's
        flash_attention_backward does not inherit it (its own axes: an overlay's entry for it).
{sharding}

    Returns:
      out [B, Sq, Hq, D] (query's shape and dtype).{no_gradient}
    """
    if block_tables is not None:
        key, value = _pages(fw, key, value, block_tables, cum_seqlens_q, cum_seqlens_k)
    return _attend(fw, dict(q=query, k=key, v=value, bias=bias, cum_seqlens_q=cum_seqlens_q,
                            cum_seqlens_k=cum_seqlens_k, softmax_aux=softmax_aux), mask_info,
                   dict(softmax_scale=softmax_scale, causal=causal, sliding_window=sliding_window,
                        logits_soft_cap=logits_soft_cap, normalize_output=normalize_output,
                        **_dropout_scalars(dropout_prob, dropout_seed)),
                   dict(precision=precision, logits_dtype=logits_dtype, platform=platform,
                        cfg=cfg), (mesh, in_specs, out_specs), return_lse=False)


def flash_attention_with_lse(fw, query, key, value, bias=None, cum_seqlens_q=None, cum_seqlens_k=None,
                             softmax_aux=None, /, *, q_segment_ids=None, kv_segment_ids=None, mask_info=None,
                             softmax_scale=None, causal=False, sliding_window=None, logits_soft_cap=None,
                             normalize_output=True, max_seqlen_q=None, max_seqlen_k=None, platform=None, cfg=None,
                             mesh=None, in_specs=None, out_specs=None):
    """flash_attention{on} returning (out, lse), lse the float32 log-sum-exp (natural log) of
    each row, [B, Hq, Sq] (varlen [1, Hq, Tq]): what merge_attention_states takes.

    Arguments as flash_attention's, and: q_segment_ids, kv_segment_ids: int32 [B, Sq] and
    [B, Sk], given together (a query sees only keys of its own segment; -1 is padding), not with
    mask_info; max_seqlen_q, max_seqlen_k: varlen: the longest sequences (default: the packed
    totals). in_specs as flash_attention's, then q_segment_ids' and kv_segment_ids'; out_specs:
    out's, with lse's following ([B, Hq, Sq] as [B, Sq, Hq, D]), or the pair.{no_gradient}
    """
    if mask_info is not None and (q_segment_ids is not None or kv_segment_ids is not None):
        raise ValueError("q_segment_ids, kv_segment_ids: not with mask_info (it gives the segment ids)")
    return _attend(fw, dict(q=query, k=key, v=value, bias=bias, cum_seqlens_q=cum_seqlens_q,
                            cum_seqlens_k=cum_seqlens_k, softmax_aux=softmax_aux, q_segment_ids=q_segment_ids,
                            kv_segment_ids=kv_segment_ids), mask_info,
                   dict(softmax_scale=softmax_scale, causal=causal, sliding_window=sliding_window,
                        logits_soft_cap=logits_soft_cap, normalize_output=normalize_output,
                        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k),
                   dict(platform=platform, cfg=cfg), (mesh, in_specs, out_specs), return_lse=True)


def _attend(fw, given, mask_info, scalars, options, sharding, return_lse):
    """The call both wrappers make: options checked, mask_info lowered, dtypes cast where the
    seed casts, head_dim padded where the kernels do not tile it."""
    if not fw.is_float_dtype(options.get("logits_dtype", _DEFAULT)):
        raise ValueError(f"logits_dtype: expected a floating dtype, got {options['logits_dtype']!r}")
    fw.check_precision(options.get("precision", _DEFAULT))
    mesh, in_specs, out_specs = sharding
    if not fw.shards:
        fw.refuse("flash_attention", mesh=mesh is not None, in_specs=in_specs is not None,
                  out_specs=out_specs is not None)
    seed = dict(q="query", k="key", v="value")
    tensors = {name: fw.array(seed.get(name, name), x) for name, x in given.items() if x is not None}
    fw.on_platform("flash_attention", _kit.platform(options.get("platform")), tensors["q"])
    q = tensors["q"]
    if "softmax_aux" in tensors:
        tensors["softmax_aux"] = fw.cast_float(tensors["softmax_aux"], "float32")
    if "bias" in tensors:
        tensors["bias"] = fw.cast_float(tensors["bias"], fw.dtype_name(q))
    if options.get("cfg") is not None:
        scalars = dict(scalars, cfg=options["cfg"])
    zero_rows, packed_3d = None, False
    if mask_info is not None and "cum_seqlens_q" in tensors:
        if mesh is not None:
            fw.refuse("flash_attention", **{"mesh (with mask_info and cum_seqlens_q)": True})
        packed_3d = _varlen_mask.lower(fw, mask_info, tensors, scalars, _band)
        visible = mask_info.q_segment_ids
        zero_rows = None if visible is None else fw.adopt(visible, tensors["q"])
    elif mask_info is not None:
        zero_rows = _lower(fw, mask_info, tensors, scalars)
    head_dim = q.shape[-1]
    tile = fw.head_dim_multiple(q)
    padded = head_dim % tile != 0
    if padded:
        if scalars["softmax_scale"] is None:
            scalars["softmax_scale"] = head_dim ** -0.5
        width = -(-head_dim // tile) * tile
        for name in ("q", "k", "v"):
            tensors[name] = fw.pad_last(tensors[name], width)
    if fw.shards and mesh is not None and in_specs is not None and out_specs is not None:
        result = _sharded(fw, tensors, scalars, mesh, _full_specs(fw, in_specs, mask_info, mesh, tensors,
                                                                   return_lse), out_specs, return_lse)
        out, lse = result if return_lse else (result, None)
    else:
        result = fw.call("flash_attention", **tensors, **scalars)
        out, lse = result["out"], result["lse"]
    if padded:
        out = out[..., :head_dim]
    if zero_rows is not None:
        out = fw.zero_rows(out, zero_rows)
    if packed_3d:
        out = out[0]
    return (out, lse) if return_lse else out


def _pages(fw, key, value, block_tables, cum_seqlens_q, cum_seqlens_k):
    """Paged key/value caches read through block_tables, as dense [B, Sk, Hkv, D]."""
    if cum_seqlens_q is not None or cum_seqlens_k is not None:
        raise ValueError("block_tables: paged K/V does not take varlen (cum_seqlens_q, cum_seqlens_k), as the seed's")
    tables = fw.array("block_tables", block_tables)
    if len(tables.shape) != 2 or fw.dtype_name(tables) not in ("int32", "int64"):
        raise ValueError(f"block_tables: expected int32 [B, max_blocks], got {fw.dtype_name(tables)} "
                         f"{list(tables.shape)}")
    k, v = fw.array("key", key), fw.array("value", value)
    for name, x in (("key", k), ("value", v)):
        if len(x.shape) != 4:
            raise ValueError(f"{name}: with block_tables, expected a paged cache [num_blocks, block_size, Hkv, D], "
                             f"got shape {list(x.shape)}")
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"value: expected key's shape {list(k.shape)} with block_tables, got {list(v.shape)}")
    b, blocks = tables.shape
    _, size, heads, dim = k.shape
    return tuple(x[tables].reshape(b, blocks * size, heads, dim) for x in (k, v))


def _dropout_scalars(dropout_prob, dropout_seed):
    """dropout_prob and dropout_seed as the spec's f32 and i64 (a seed of 2^63 or more as its
    u64 bits); none at p = 0, so the call is the no-dropout one."""
    if isinstance(dropout_prob, bool) or not isinstance(dropout_prob, (int, float)):
        raise TypeError(f"dropout_prob: expected a float in [0, 1), got {type(dropout_prob).__name__}")
    if not (0.0 <= dropout_prob < 1.0):  # NaN fails too
        raise ValueError(f"dropout_prob: expected a float in [0, 1), got {dropout_prob!r}")
    seed = 0 if dropout_seed is None else dropout_seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not -(1 << 63) <= seed < (1 << 64):
        raise ValueError(f"dropout_seed: expected None or an int in [-2^63, 2^64), got {dropout_seed!r}")
    if dropout_prob == 0.0:
        return {}
    return dict(dropout_prob=float(dropout_prob), dropout_seed=seed - (1 << 64) if seed >= (1 << 63) else seed)


def _lower(fw, mask_info, tensors, scalars):
    """mask_info as segment ids and a band, merged into tensors and scalars; returns the seed's
    visible query ids (rows at -1 give 0), or None."""
    lowered = _kit.lower_mask_info(mask_info)
    if lowered.attention_mask is not None:
        tensors["attention_mask"] = _dense_mask(fw, mask_info.xp, lowered.attention_mask, tensors["q"])
    if lowered.q_segment_ids is not None:
        tensors["q_segment_ids"] = fw.adopt(lowered.q_segment_ids, tensors["q"])
        tensors["kv_segment_ids"] = fw.adopt(lowered.kv_segment_ids, tensors["q"])
    if lowered.band != (None, None):
        causal, window = _band(lowered.band, fw.scalar("causal", scalars["causal"], "bool"),
                               scalars["sliding_window"], tensors["k"].shape[1])
        scalars["causal"], scalars["sliding_window"] = causal, window
    visible = mask_info.q_segment_ids
    return None if visible is None else fw.adopt(visible, tensors["q"])


def _dense_mask(fw, xp, mask, q):
    """MaskInfo's dense term (bool [B, H|1, Q, K], in the MaskInfo's arrays: `xp`) as the
    kernel's attention_mask: uint8 on q's device, true = visible."""
    m = mask[:, None] if mask.ndim == 3 else mask
    return fw.adopt(xp.astype(m != 0, xp.uint8), q)


def _band(band, causal, sliding_window, kv_len):
    """The band of visible k - q offsets [-left, right] of a mask, narrowed by the call's causal
    and sliding_window, as the kernel's (causal, sliding_window)."""
    left, right = band
    if causal:
        right = 0 if right is None else min(right, 0)
    if sliding_window is not None:
        w = _kit.scalar("sliding_window", sliding_window, "i64[2]")
        left = w[0] if left is None else min(left, w[0])
        right = w[1] if right is None else min(right, w[1])
    if left is None and right == 0:
        return True, None
    if (left is not None and left < 0) or (right is not None and right < 0):
        raise NotImplementedError(f"mask_info: keys at k - q in [{'-inf' if left is None else -left}, "
                                  f"{'inf' if right is None else right}] exclude each query's own position, which "
                                  "ejkernel (C++)'s flash kernel cannot express (its window bounds are >= 0)")
    # A bound past the keys means no limit on that side.
    return False, (kv_len if left is None else left, kv_len if right is None else right)


def _full_specs(fw, in_specs, mask_info, mesh, tensors, return_lse):
    """The seed's seven in_specs, and the segment ids' (from mask_info's shardings, as the seed
    takes them; flash_attention_with_lse: given after the seven)."""
    from jax.sharding import PartitionSpec
    if (not isinstance(in_specs, (tuple, list)) or isinstance(in_specs, PartitionSpec)
            or len(in_specs) not in ((_SEED_SPECS, _SEED_SPECS + 2) if return_lse else (_SEED_SPECS,))):
        raise ValueError(f"in_specs: expected {_SEED_SPECS} PartitionSpecs (None for an argument not given), one for "
                         f"each of {', '.join(_SPEC_ORDER[:_SEED_SPECS])}, in this order; got {in_specs!r}")
    specs = tuple(in_specs) + (None,) * (len(_SPEC_ORDER) - len(in_specs))
    if mask_info is not None and "q_segment_ids" in tensors:
        shardings = mask_info.get_shardings(False, mesh=mesh)
        specs = specs[:_SEED_SPECS] + (shardings.q_segment_ids, shardings.kv_segment_ids) + specs[_SEED_SPECS + 2:]
    if mask_info is not None and "attention_mask" in tensors:
        dense = mask_info.get_shardings(False, mesh=mesh).attention_mask
        if dense is not None and len(dense) == 3:  # a [B, Q, K] term, given to the kernel as [B, 1, Q, K]
            dense = PartitionSpec(dense[0], None, *dense[1:])
        specs = specs[:-1] + (dense,)
    return specs


WRAPPERS = (flash_attention, flash_attention_with_lse)

_JAX_SHARDING = """\
      mesh, in_specs, out_specs: given all three, the call runs under jax.shard_map over mesh, each
        device running the kernel on its local shard; given fewer, unsharded (as in
        ejkernel.modules). in_specs: the seed's seven, a PartitionSpec for each of query, key,
        value, bias, softmax_aux, cum_seqlens_q, cum_seqlens_k, in this order (None: replicated,
        or not given); mask_info's segment ids are sharded as its get_shardings() says.
        out_specs: query's spec (out has its shape). Sharding batch or heads is exact (shard k,
        v, bias, segment ids and [Hq, S] sinks alike). Sharding a sequence axis is not, and
        nothing guards against it (nor in ejkernel.modules): a query sees only its shard's
        keys, and causal and sliding_window count positions within the shard. A mesh with
        explicit axes (jax.make_mesh's default) needs the operands sharded as in_specs say
        already, as shard_map does."""

# The framework's parts of the docstring.
DOCS = {"jax": {"sharding": _JAX_SHARDING},
        "torch": {"on": ", on torch tensors", "devices": ", on one device (CPU or CUDA)",
                  "sharding": "      mesh, in_specs, out_specs: None only."}}


def _vmap(op, size, names, in_batched, operands, scalars):
    """Folds the mapped axis into B; packed varlen and per-example sinks map one at a time, and
    so do dropout calls with a bias or sinks: the backward maps those one at a time, and the keep
    mask of a folded example (its batch index) must be the one its gradient sees."""
    from .. import _batching
    batched = dict(zip(names, in_batched))
    dropout_apart = scalars.get("dropout_prob", 0.0) != 0.0 and {"bias", "softmax_aux"} & set(names)
    if "cum_seqlens_q" in names or batched.get("softmax_aux") or dropout_apart:
        return _batching.sequential(op, in_batched, operands)
    q = operands[0]
    batch = q.shape[1] if batched["q"] else q.shape[0]
    folded = []
    for name, x, b in zip(names, operands, in_batched):
        if name == "softmax_aux":
            folded.append(x)
        elif name in ("bias", "attention_mask"):
            folded.append(_batching.fold_broadcastable(x, b, size, batch))
        else:
            folded.append(_batching.fold(x, b, size))
    return tuple(_batching.unfold(y, size, batch) for y in op(*folded))


def _vmap_backward(op, size, names, in_batched, operands):
    """The backward's rule: folded as the forward's, except with a bias or sinks (their gradients
    sum over B, so folded examples would be summed together) or packed varlen: one at a time.
    The 0-d placeholders of absent dbias and dsoftmax_aux come back as zeros per example."""
    import jax.numpy as jnp
    from .. import _batching
    if {"cum_seqlens_q", "bias", "softmax_aux"} & set(names):
        return _batching.sequential(op, in_batched, operands)
    q = operands[0]
    batch = q.shape[1] if in_batched[0] else q.shape[0]
    # The dense mask may broadcast over the batch (B|1), as a forward's bias does.
    outs = op(*(_batching.fold_broadcastable(x, b, size, batch) if name == "attention_mask"
                else _batching.fold(x, b, size) for name, x, b in zip(names, operands, in_batched)))
    return tuple(_batching.unfold(y, size, batch) if y.ndim else jnp.zeros((size,), y.dtype) for y in outs)


_vmap.takes_scalars = True
VMAP = {"flash_attention": _vmap, "flash_attention_backward": _vmap_backward}


def _sharded(fw, tensors, scalars, mesh, in_specs, out_specs, return_lse):
    """The call under shard_map; in_specs in _SPEC_ORDER (None: replicated, or not given);
    out_specs: query's spec, or with return_lse also the pair (query's, lse's)."""
    import jax
    from jax.sharding import PartitionSpec

    from .. import _sharding
    _sharding.check_mesh(mesh)
    if (not isinstance(in_specs, (tuple, list)) or isinstance(in_specs, PartitionSpec)
            or len(in_specs) != len(_SPEC_ORDER)):
        raise ValueError(f"in_specs: expected {len(_SPEC_ORDER)} PartitionSpecs (None for an argument not "
                         f"given), one for each of {', '.join(_SPEC_ORDER)}, in this order; got {in_specs!r}")
    names = tuple(tensors)
    operands = tuple(tensors.values())
    by_name = dict(zip(_SPEC_ORDER, in_specs))
    seed_names = [_SPEC_NAMES.get(name, name) for name in names]
    specs = [PartitionSpec() if by_name[name] is None else by_name[name] for name in seed_names]
    for name, spec, x in zip(seed_names, specs, operands):
        _sharding.check_spec(f"in_specs[{_SPEC_ORDER.index(name)}] ({name})", spec, x.shape, mesh)

    def run(*local):
        result = fw.call("flash_attention", **dict(zip(names, local)), **scalars)
        return result["out"], result["lse"]

    q = operands[0]
    jax.eval_shape(run, *operands)  # libejk's checks, on the global shapes
    # out has query's shape and lse is [B, Hq, Sq]: any other spec would assemble the shards wrongly.
    q_axes = _sharding.normal(specs[0], q.ndim)
    lse_axes = (q_axes[0], q_axes[2], q_axes[1]) if q.ndim == 4 else (None, q_axes[1], q_axes[0])
    lse_spec = PartitionSpec(*lse_axes)
    pair = return_lse and isinstance(out_specs, (tuple, list)) and not isinstance(out_specs, PartitionSpec)
    if pair and len(out_specs) == 2:
        given = (("out_specs[0] (out)", out_specs[0], specs[0]), ("out_specs[1] (lse)", out_specs[1], lse_spec))
    elif isinstance(out_specs, PartitionSpec):
        given = (("out_specs", out_specs, specs[0]),)
    else:
        raise ValueError("out_specs: expected a PartitionSpec for the output" +
                         (", or a pair of them for (out, lse)" if return_lse else "") + f"; got {out_specs!r}")
    for where, spec, expected in given:
        if not isinstance(spec, PartitionSpec) or _sharding.normal(spec, 4) != _sharding.normal(expected, 4):
            raise ValueError(f"{where}: expected {expected}, as query's in_specs[0] shards it, got {spec!r}")
    if return_lse:
        return _sharding.run(run, mesh, specs, (specs[0], lse_spec), operands)
    return _sharding.run(lambda *x: run(*x)[0], mesh, specs, specs[0], operands)


# Each differentiable input and its gradient among flash_attention_backward's outputs (segment
# ids and cum_seqlens are integers: no gradient).
_GRADIENT_OF = {"q": "dq", "k": "dk", "v": "dv", "bias": "dbias", "softmax_aux": "dsoftmax_aux"}


def _backward(call, shape, inputs, scalars, grads, outputs):
    """flash_attention_backward on the forward's inputs, its saved out and lse, and the gradients
    of out and lse; the gradients of the inputs given."""
    result = call("flash_attention_backward", **inputs, **scalars, out=outputs["out"], lse=outputs["lse"],
                  d_out=grads["out"], d_lse=grads.get("lse"))
    return {name: result[d] for name, d in _GRADIENT_OF.items() if name in inputs}


_backward.uses_outputs = True  # out and lse are saved by the forward, never recomputed
GRADIENTS = {"flash_attention": _backward}
# The docstring's gradient sentence, in every framework.
for _parts in DOCS.values():
    _parts["no_gradient"] = (" Differentiable (flash_attention_backward from the saved out and lse): gradients "
                             "reach query, key, value, bias and softmax_aux, through out and lse. Deterministic at no "
                             "cost: no atomics, two runs give bit-identical gradients; dropout uses the forward's seed.")
