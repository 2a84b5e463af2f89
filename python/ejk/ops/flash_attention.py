"""flash_attention, with ``ejkernel.modules.flash_attention``'s signature: the seed's argument
names and order, what ejkernel (C++) lacks refused by name, and (JAX) its shard_map wrapper."""

_OPTIONAL = ("bias", "q_segment_ids", "kv_segment_ids", "cum_seqlens_q", "cum_seqlens_k", "softmax_aux")
# in_specs' order in ejkernel.modules (its shard_map wrapper's operands), not the positional one.
_SPEC_ORDER = ("query", "key", "value", "attention_mask", "bias", "softmax_aux", "cum_seqlens_q",
               "cum_seqlens_k", "q_segment_ids", "kv_segment_ids")
_SPEC_NAMES = {"q": "query", "k": "key", "v": "value"}


def flash_attention(fw, query, key, value, attention_mask=None, bias=None, q_segment_ids=None, kv_segment_ids=None,
                    cum_seqlens_q=None, cum_seqlens_k=None, softmax_aux=None, /, *, softmax_scale=None,
                    dropout_prob=0.0, causal=False, dropout_seed=None, sliding_window=None, logits_soft_cap=None,
                    normalize_output=True, precision=None, logits_dtype=None, platform=None, cfg=None, mesh=None,
                    in_specs=None, out_specs=None, max_seqlen_q=None, max_seqlen_k=None, return_lse=False):
    """Flash attention forward, as ``ejkernel.modules.flash_attention``{on}.

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
      float32 log-sum-exp (natural log) of each row, [B, Hq, Sq] (varlen [1, Hq, Tq]).{no_gradient}
    """
    fw.refuse("flash_attention", attention_mask=attention_mask is not None, dropout_prob=dropout_prob != 0.0,
              precision=not fw.is_default_precision(precision), logits_dtype=not fw.is_float32(logits_dtype),
              platform=platform not in (None, "auto"), cfg=cfg is not None,
              **({} if fw.shards else dict(mesh=mesh is not None, in_specs=in_specs is not None,
                                           out_specs=out_specs is not None)))
    tensors = {"q": fw.array("query", query), "k": fw.array("key", key), "v": fw.array("value", value)}
    for name, x in zip(_OPTIONAL, (bias, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k, softmax_aux)):
        if x is not None:
            tensors[name] = fw.array(name, x)
    scalars = dict(softmax_scale=softmax_scale, causal=causal, sliding_window=sliding_window,
                   logits_soft_cap=logits_soft_cap, normalize_output=normalize_output, max_seqlen_q=max_seqlen_q,
                   max_seqlen_k=max_seqlen_k)
    fw.scalar("return_lse", return_lse, "bool")
    if fw.shards and mesh is not None and in_specs is not None and out_specs is not None:
        return _sharded(fw, tensors, scalars, mesh, in_specs, out_specs, return_lse)
    result = fw.call("flash_attention", **tensors, **scalars)
    return (result["out"], result["lse"]) if return_lse else result["out"]


WRAPPERS = (flash_attention,)

_JAX_SHARDING = """\
      platform ("auto" or None), cfg: None only.
      mesh, in_specs, out_specs: given all three, the call runs under jax.shard_map over mesh, each
        device running the kernel on its local shard; given fewer, unsharded (as in
        ejkernel.modules). in_specs: a PartitionSpec for each of query, key, value,
        attention_mask, bias, softmax_aux, cum_seqlens_q, cum_seqlens_k, q_segment_ids,
        kv_segment_ids, in this order (ejkernel.modules' order, not the positional one); None
        means replicated, or not given. out_specs: query's spec (out has its shape); with
        return_lse, lse's follows ([B, Hq, Sq] as [B, Sq, Hq, D]), or pass the pair. Sharding
        batch or heads is exact (shard k, v, bias, segment ids and [Hq, S] sinks alike).
        Sharding a sequence axis is not, and nothing guards against it (nor in
        ejkernel.modules): a query sees only its shard's keys, and causal and sliding_window
        count positions within the shard. A mesh with explicit axes (jax.make_mesh's default)
        needs the operands sharded as in_specs say already, as shard_map does."""

# The framework's parts of the docstring.
DOCS = {"jax": {"sharding": _JAX_SHARDING},
        "torch": {"on": ", on torch tensors", "devices": ", on one device (CPU or CUDA)",
                  "sharding": '      platform ("auto" or None), cfg, mesh, in_specs, out_specs: None only.'}}


def _vmap(op, size, names, in_batched, operands):
    """Folds the mapped axis into B; packed varlen and per-example sinks map one at a time."""
    from .. import _batching
    batched = dict(zip(names, in_batched))
    if "cum_seqlens_q" in names or batched.get("softmax_aux"):
        return _batching.sequential(op, in_batched, operands)
    q = operands[0]
    batch = q.shape[1] if batched["q"] else q.shape[0]
    folded = []
    for name, x, b in zip(names, operands, in_batched):
        if name == "softmax_aux":
            folded.append(x)
        elif name == "bias":
            folded.append(_batching.fold_broadcastable(x, b, size, batch))
        else:
            folded.append(_batching.fold(x, b, size))
    return tuple(_batching.unfold(y, size, batch) for y in op(*folded))


VMAP = {"flash_attention": _vmap}


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
                             "reach query, key, value, bias and softmax_aux, through out and lse.")
