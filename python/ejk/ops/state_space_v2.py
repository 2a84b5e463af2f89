"""state_space_v2 (Mamba-2), with ``ejkernel.modules.state_space_v2``'s signature (aliases ssm2 and
mamba2), differentiable through state_space_v2_backward. The gate and the gated RMSNorm span
every head of a token; they are applied here, in float32, on the kernel's output."""
import inspect

from .state_space_v1 import _float32, _like

_TENSORS = (("x", "x"), ("A", "a"), ("B", "b"), ("C", "c"), ("D", "d"), ("dt", "dt"),
            ("initial_state", "initial_state"))


def _silu(fw, g):
    if fw.name == "jax":
        import jax
        return jax.nn.silu(g)
    import torch
    return torch.nn.functional.silu(g)


def _gated(fw, y, gate, act_fn, use_gated_rmsnorm, eps):
    """The seed's gating of y [b, s, H P]: y act(gate), or with use_gated_rmsnorm
    y rsqrt(mean(y^2 over H P) + eps) act(gate), in float32 (no learnable weight)."""
    act = act_fn if act_fn is not None else (lambda g: _silu(fw, g))
    if not use_gated_rmsnorm:
        return y * act(gate)
    y32, g32 = _float32(y), _float32(gate)
    square = y32 * y32
    mean = square.mean(axis=-1, keepdims=True) if fw.name == "jax" else square.mean(dim=-1, keepdim=True)
    return _like(y32 / (mean + eps) ** 0.5 * act(g32), y)


def state_space_v2(fw, x, A, B, C, D, dt, /, gate=None, initial_state=None, conv_state=None, *, n_groups=1,
                   act_fn=None, use_gated_rmsnorm=False, rmsnorm_eps=1e-5, cu_seqlens=None, precision=None,
                   platform=None, cfg=None):
    """Mamba-2's scan, as ``ejkernel.modules.state_space_v2``; differentiable.

    Per sequence, head h and head dim p, a float32 state [N] (from initial_state or zeros) walks
    the tokens with the head's decay: h = exp(A[h] dt_t[h]) h + dt_t[h] x_t[h, p] B_t[g];
    y_t[h, p] = h . C_t[g] + D[h] x_t[h, p], with g = h // (H / n_groups). y is reshaped to
    [batch, seq_len, H P]; with a gate, y act_fn(gate) (default SiLU), or with
    use_gated_rmsnorm y rsqrt(mean(y^2 over H P) + rmsnorm_eps) act_fn(gate) in float32.

    Args:
      x: [batch, seq_len, H, P] (float32, bfloat16 or float16); B, C and dt in the same dtype.
      A, D: [H], used in float32.
      B, C: [batch, seq_len, n_groups, N]; dt: [batch, seq_len, H] (already softplus-ed).
      gate: [batch, seq_len, H P] or None.
      initial_state: [batch, H, P, N] (used in float32) or None (zeros).
      conv_state: returned as given.
      n_groups: the groups of B and C (must match B's dim 2 and divide H).
      act_fn, use_gated_rmsnorm, rmsnorm_eps: the gating, as above.
      cu_seqlens: int32 [N + 1] or None; an extension of the seed's signature. Packed varlen:
        x, B, C, dt and gate are [1, T, ...] and sequence s is tokens
        [cu_seqlens[s], cu_seqlens[s + 1]) (from 0, non-decreasing, ending at T), each with its
        own initial_state [N, H, P, N_state] (or zeros); the final state is [N, H, P, N_state],
        an empty sequence's being its initial state. The gating is per token, as without it.
      precision (default only), platform ("auto" or None), cfg: None only.

    Returns:
      (y [batch, seq_len, H P] in x's dtype, the final state [batch, H, P, N] in x's dtype,
      conv_state). Gradients reach every tensor but conv_state; the backward recomputes the
      states per chunk instead of saving them per token.
    """
    fw.refuse("state_space_v2", platform=platform not in (None, "auto"),
              precision=not fw.is_default_precision(precision))
    n_groups = fw.scalar("n_groups", n_groups, "i64")
    rmsnorm_eps = fw.scalar("rmsnorm_eps", rmsnorm_eps, "f64")
    tensors = {name: fw.array(seed, v) for (seed, name), v in
               zip(_TENSORS, (x, A, B, C, D, dt, initial_state))}
    tensors["cu_seqlens"] = fw.array("cu_seqlens", cu_seqlens)
    gate = fw.array("gate", gate)
    xs = tensors["x"]
    if len(tensors["b"].shape) == 4 and tensors["b"].shape[2] != n_groups:
        raise ValueError(f"state_space_v2: n_groups: {n_groups} does not match B's dim 2 "
                         f"({tensors['b'].shape[2]})")
    for name in ("a", "d", "initial_state"):
        tensors[name] = _float32(tensors[name])
    result = fw.call("state_space_v2", cfg=cfg, **tensors)
    b, s, h, p = xs.shape
    y = result["y"].reshape(b, s, h * p)
    if gate is not None:
        y = _gated(fw, y, gate, act_fn, use_gated_rmsnorm, rmsnorm_eps)
    return _like(y, xs), _like(result["final_state"], xs), conv_state


def _alias(name):
    def alias(fw, *args, **kwargs):
        return state_space_v2(fw, *args, **kwargs)
    alias.__name__ = alias.__qualname__ = name
    alias.__signature__ = inspect.signature(state_space_v2)
    alias.__doc__ = f"``{name}``: ejkernel's alias of state_space_v2.\n\n    " + state_space_v2.__doc__
    alias.op = "state_space_v2"
    return alias


ssm2 = _alias("ssm2")
mamba2 = _alias("mamba2")
WRAPPERS = (state_space_v2, ssm2, mamba2)

_GRADIENT_OF = {"x": "dx", "a": "da", "b": "db", "c": "dc", "d": "dd", "dt": "ddt", "initial_state": "d_initial_state"}


def _backward(call, shape, inputs, scalars, grads):
    """The backward op on the forward's inputs and the outputs' gradients."""
    result = call("state_space_v2_backward", **inputs, d_y=grads["y"], d_final_state=grads.get("final_state"))
    return {name: result[d] for name, d in _GRADIENT_OF.items() if name in inputs}


GRADIENTS = {"state_space_v2": _backward}

_UNBATCHED = ("a", "d")


def _vmap(op, size, names, in_batched, operands):
    """The forward, a and d not mapped and dense: the mapped axis folds into the batch (packed
    varlen maps one example at a time)."""
    from .. import _batching
    batched = dict(zip(names, in_batched))
    if "cu_seqlens" in names or any(batched.get(name) for name in _UNBATCHED):
        return _batching.sequential(op, in_batched, operands)
    x = operands[0]
    batch = x.shape[1] if batched["x"] else x.shape[0]
    folded = [x if name in _UNBATCHED else _batching.fold(x, b, size) for name, x, b in zip(names, operands, in_batched)]
    return tuple(_batching.unfold(y, size, batch) for y in op(*folded))


def _vmap_backward(op, size, names, in_batched, operands):
    from .. import _batching
    return _batching.sequential(op, in_batched, operands)


VMAP = {"state_space_v2": _vmap, "state_space_v2_backward": _vmap_backward}
