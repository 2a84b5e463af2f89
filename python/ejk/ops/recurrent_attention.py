"""recurrent_attention, with ``ejkernel.modules.recurrent_attention``'s signature, differentiable
through recurrent_attention_backward (dense and packed varlen)."""
from .. import _kit

# The seed's positional tensors and the spec's names for them.
_TENSORS = (("query", "q"), ("key", "k"), ("value", "v"), ("g", "g"), ("g_gamma", "g_gamma"), ("gk", "gk"),
            ("gv", "gv"), ("initial_state", "initial_state"), ("cu_seqlens", "cu_seqlens"))


def recurrent_attention(fw, query, key, value, g=None, g_gamma=None, gk=None, gv=None, initial_state=None,
                        cu_seqlens=None, /, *, softmax_scale=None, reverse=False, return_state=False, platform=None,
                        cfg=None):
    """Gated linear attention as a recurrence, as ``ejkernel.modules.recurrent_attention``; differentiable.

    Per sequence and head, a state S [K, V] (float32, from initial_state or zeros) walks the
    tokens; every gate is in log space: S *= exp(g_t)[:, None]; S *= exp(g_gamma[h]);
    S *= exp(gk_t)[:, None]; S *= exp(gv_t)[None, :]; S += k_t v_t^T; o_t = (scale q_t)^T S,
    read after the token's own update.

    Args:
      query, key: [B, T, H, K]; packed varlen (with cu_seqlens): [T, H, K] or [1, T, H, K].
      value: [B, T, H, V] (varlen [T, H, V] or [1, T, H, V]). float32, bfloat16 or float16; the
        per-token gates in the same dtype.
      g, gk: [B, T, H, K] log decays of the state's rows (the key dim), g applied before gk. g may
        also be [B, T, H] (varlen [T, H] or [1, T, H]), one log decay of the whole state per
        token and head, as the seed's Triton kernel reads it (simple GLA): the op's g_head.
      g_gamma: float32 [H], a log decay per head at every token (not differentiated).
      gv: [B, T, H, V] log decays of the state's columns (the value dim).
      initial_state: float32 [B, H, K, V] (varlen [N, H, K, V]: one per sequence); default zeros.
      cu_seqlens: int32 [N + 1], packed varlen: start of each sequence, from 0, non-decreasing,
        ending at T (not differentiated).
      softmax_scale: multiplies q (default 1/sqrt(K)).
      reverse: walk every sequence from its last token to its first.
      return_state: also return the final state.
      platform: None or "auto" (where query is), "cpu", "cuda"; the seed's "xla" is "auto",
        its "triton", "cute", "tilelang" are "cuda"; "pallas" is refused.
      cfg: None only (the op has no tuning axes: anything else is a ValueError).

    Returns:
      o [B, T, H, V] (value's shape, query's dtype); with return_state, (o, final_state) where
      final_state is float32 [B, H, K, V] (varlen [N, H, K, V]). Gradients reach query, key,
      value, g, gk, gv and initial_state (the states are recomputed from checkpoints, not
      saved per token); those of g and gk are equal, as both scale the same rows. A [B, T, H] g
      gets the sum over K of the gradient of its broadcast.
    """
    return_state = fw.scalar("return_state", return_state, "bool")
    tensors = {name: fw.array(seed, x) for (seed, name), x in
               zip(_TENSORS, (query, key, value, g, g_gamma, gk, gv, initial_state, cu_seqlens))}
    head_gate(tensors)
    fw.on_platform("recurrent_attention", _kit.platform(platform), tensors["q"])
    result = fw.call("recurrent_attention", cfg=cfg, **tensors, softmax_scale=softmax_scale, reverse=reverse)
    return (result["o"], result["final_state"]) if return_state else result["o"]


def head_gate(tensors):
    """A g with one value per token and head (q's rank less one: the seed's Triton reading) is
    passed as g_head; tensors maps the spec's names, in place."""
    g, q = tensors.get("g"), tensors.get("q")
    if g is not None and q is not None and len(g.shape) == len(q.shape) - 1:
        tensors["g_head"] = tensors.pop("g")


WRAPPERS = (recurrent_attention,)

# Each differentiable input and its gradient among the backward op's outputs.
_GRADIENT_OF = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "gk": "dgk", "gv": "dgv",
                "initial_state": "d_initial_state"}


def _xp(x):
    """x's array namespace (torch or jax.numpy)."""
    if type(x).__module__.startswith("torch"):
        import torch
        return torch
    import jax.numpy as jnp
    return jnp


def _key_sum(dg, dtype):
    """The sum over K of dg, in float32, then in the gate's dtype."""
    xp = _xp(dg)
    if xp.__name__ == "torch":
        return dg.float().sum(-1).to(dtype)
    return dg.astype(xp.float32).sum(-1).astype(dtype)


def _backward(call, shape, inputs, scalars, grads):
    """The backward op on the forward's inputs and the outputs' gradients; of its gradients,
    those of the inputs given (one of a gate not given is that of a gate of zeros). g_head's is
    dg summed over K: dg, the gradient of a per-row gate, sees the same decay on every row."""
    result = call("recurrent_attention_backward", **inputs, **scalars, d_o=grads["o"],
                  d_final_state=grads.get("final_state"))
    out = {name: result[d] for name, d in _GRADIENT_OF.items() if name in inputs}
    if inputs.get("g_head") is not None:
        out["g_head"] = _key_sum(result["dg"], inputs["g_head"].dtype)
    return out


GRADIENTS = {"recurrent_attention": _backward}


def _vmap(op, size, names, in_batched, operands):
    """Dense: the mapped axis folds into B (every tensor but g_gamma leads with B, as does every
    output); packed varlen and a mapped g_gamma map one example at a time."""
    from .. import _batching
    batched = dict(zip(names, in_batched))
    if "cu_seqlens" in names or batched.get("g_gamma"):
        return _batching.sequential(op, in_batched, operands)
    q = operands[0]
    batch = q.shape[1] if batched["q"] else q.shape[0]
    folded = [x if name == "g_gamma" else _batching.fold(x, b, size) for name, x, b in zip(names, operands, in_batched)]
    return tuple(_batching.unfold(y, size, batch) for y in op(*folded))


VMAP = {"recurrent_attention": _vmap, "recurrent_attention_backward": _vmap}
