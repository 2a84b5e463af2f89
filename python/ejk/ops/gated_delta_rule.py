"""gated_delta_rule, with ``ejkernel.modules.gated_delta_rule``'s signature, differentiable
through gated_delta_rule_backward."""


def _cast(fw, x, dtype):
    """x as `dtype` ("float32" or like another array's dtype), differentiably."""
    if x is None:
        return None
    if fw.name == "torch":
        import torch
        return x.to(torch.float32 if dtype == "float32" else dtype)
    import jax.numpy as jnp
    return x.astype(jnp.float32 if dtype == "float32" else dtype)


def gated_delta_rule(fw, query, key, value, beta, decay=None, seg_ids=None, initial_state=None, /, *,
                     autotune_chunk_candidates=None, use_qk_l2norm=True, use_chunked=True, return_state=False,
                     platform=None, cfg=None, mesh=None, in_specs=None, out_specs=None):
    """The gated delta rule (Gated DeltaNet), as ``ejkernel.modules.gated_delta_rule``; differentiable.

    Per sequence and head, a float32 state S [K, V] (from initial_state, else zeros) walks the
    tokens. With use_qk_l2norm, q and k are divided by sqrt(sum x^2 + 1e-6); q is scaled by
    1/sqrt(K). Per token, a = exp(clamp(decay_t, -20, 20)): S = a S; u = S^T k;
    S += k (beta_t (v - u))^T; o = S^T q (after the token's own update). Where seg_ids changes
    between neighbouring tokens, a new segment starts from a zero state.

    Args:
      query, key: [B, T, H, K]; value: [B, T, H, V]. float32, bfloat16 or float16.
      beta: [B, T, H], in query's dtype: the write strength.
      decay: [B, T, H] log decays (<= 0 in practice), in query's dtype; default none.
      seg_ids: int32 [B, T] segment (document) ids (not differentiated).
      initial_state: [B, H, K, V] (taken as float32); default zeros. It belongs to the first segment.
      autotune_chunk_candidates, use_chunked: accepted; the recurrence is exact either way.
      use_qk_l2norm: L2-normalize q and k first (default True).
      return_state: also return the final state.
      platform ("auto" or None), cfg, mesh, in_specs, out_specs: None only.

    Returns:
      o [B, T, H, V] in query's dtype; with return_state, (o, final_state), final_state
      [B, H, K, V] in query's dtype as the seed's. Gradients reach query, key, value, beta, decay
      and initial_state (the decay's is 0 where the clamp is active).
    """
    fw.refuse("gated_delta_rule", platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    return_state = fw.scalar("return_state", return_state, "bool")
    fw.scalar("use_chunked", use_chunked, "bool")
    query = fw.array("query", query)
    result = fw.call("gated_delta_rule", cfg=cfg, q=query, k=fw.array("key", key), v=fw.array("value", value),
                     beta=fw.array("beta", beta), decay=fw.array("decay", decay), seg_ids=fw.array("seg_ids", seg_ids),
                     initial_state=_cast(fw, fw.array("initial_state", initial_state), "float32"),
                     use_qk_l2norm=use_qk_l2norm)
    return (result["o"], _cast(fw, result["final_state"], query.dtype)) if return_state else result["o"]


WRAPPERS = (gated_delta_rule,)

# Each differentiable input and its gradient among the backward op's outputs.
_GRADIENT_OF = {"q": "dq", "k": "dk", "v": "dv", "beta": "dbeta", "decay": "ddecay",
                "initial_state": "d_initial_state"}


def _backward(call, shape, inputs, scalars, grads):
    """The backward op on the forward's inputs and the outputs' gradients; of its gradients,
    those of the differentiable inputs given."""
    result = call("gated_delta_rule_backward", **inputs, **scalars, d_o=grads["o"],
                  d_final_state=grads.get("final_state"))
    return {name: result[d] for name, d in _GRADIENT_OF.items() if name in inputs}


GRADIENTS = {"gated_delta_rule": _backward}


def _vmap(op, size, names, in_batched, operands):
    """Every tensor and output leads with B: the mapped axis folds into it."""
    from .. import _batching
    q = operands[0]
    batched = dict(zip(names, in_batched))
    batch = q.shape[1] if batched["q"] else q.shape[0]
    folded = [_batching.fold(x, b, size) for x, b in zip(operands, in_batched)]
    return tuple(_batching.unfold(y, size, batch) for y in op(*folded))


VMAP = {"gated_delta_rule": _vmap, "gated_delta_rule_backward": _vmap}
