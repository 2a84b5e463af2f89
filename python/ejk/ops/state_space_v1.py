"""state_space_v1 (Mamba-1's selective scan), with ``ejkernel.modules.state_space_v1``'s signature
(aliases ssm1 and mamba1), differentiable through state_space_v1_backward."""
import inspect

# The seed's positional tensors and the spec's names for them.
_TENSORS = (("hidden_states", "x"), ("A", "a"), ("B", "b"), ("C", "c"), ("D", "d"), ("dt", "dt"),
            ("gate", "gate"), ("initial_state", "initial_state"))


def _float32(x):
    """x in float32 (A, D and the state are float32 in the kernels); differentiable."""
    if x is None:
        return None
    return x.astype("float32") if hasattr(x, "astype") else x.float()


def _like(x, ref):
    """x in ref's dtype; differentiable."""
    return x.astype(ref.dtype) if hasattr(x, "astype") else x.to(ref.dtype)


def state_space_v1(fw, hidden_states, A, B, C, D, dt, /, gate=None, initial_state=None, conv_state=None, *,
                   act_fn=None, cu_seqlens=None, platform=None, cfg=None):
    """Mamba-1's selective scan, as ``ejkernel.modules.state_space_v1``; differentiable.

    Per sequence and channel c, a float32 state h [N] (from initial_state or zeros) walks the
    tokens: h = exp(A[c] dt_t[c]) h + dt_t[c] x_t[c] B_t; y_t[c] = h . C_t + D[c] x_t[c]; with a
    gate, y *= act_fn(gate) (default SiLU, fused into the kernel; another act_fn is applied
    after it). No convolution is applied and dt is taken as given (already softplus-ed).

    Args:
      hidden_states: [batch, seq_len, d] (float32, bfloat16 or float16); B, C, dt and gate in the
        same dtype.
      A: [d, N], real (negative for decay); D: [d]. Both are used in float32.
      B, C: [batch, seq_len, N]; dt: [batch, seq_len, d].
      gate: [batch, seq_len, d] or None.
      initial_state: [batch, d, N] (used in float32) or None (zeros).
      conv_state: returned as given (the caller's convolution cache).
      act_fn: the gate's activation; None is SiLU.
      cu_seqlens: int32 [N + 1] or None; an extension of the seed's signature. Packed varlen:
        hidden_states, B, C, dt and gate are [1, T, ...] and sequence s is tokens
        [cu_seqlens[s], cu_seqlens[s + 1]) (from 0, non-decreasing, ending at T), each with its
        own initial_state [N, d, N_state] (or zeros); the final state is [N, d, N_state], an
        empty sequence's being its initial state.
      platform ("auto" or None), cfg: None only.

    Returns:
      (y [batch, seq_len, d] in hidden_states' dtype, the final state [batch, d, N] in
      hidden_states' dtype, conv_state). Gradients reach every tensor but conv_state; the
      backward recomputes the states per chunk instead of saving them per token.
    """
    fw.refuse("state_space_v1", platform=platform not in (None, "auto"))
    arrays = [fw.array(seed, x) for (seed, _), x in
              zip(_TENSORS, (hidden_states, A, B, C, D, dt, gate, initial_state))]
    tensors = dict(zip((name for _, name in _TENSORS), arrays))
    tensors["cu_seqlens"] = fw.array("cu_seqlens", cu_seqlens)
    x = tensors["x"]
    for name in ("a", "d", "initial_state"):
        tensors[name] = _float32(tensors[name])
    fused = act_fn is None
    if not fused:
        tensors["gate"] = None
    result = fw.call("state_space_v1", cfg=cfg, **tensors)
    y = result["y"]
    if not fused and arrays[6] is not None:
        y = y * act_fn(arrays[6])
    return _like(y, x), _like(result["final_state"], x), conv_state


def _alias(name):
    def alias(fw, *args, **kwargs):
        return state_space_v1(fw, *args, **kwargs)
    alias.__name__ = alias.__qualname__ = name
    alias.__signature__ = inspect.signature(state_space_v1)
    alias.__doc__ = f"``{name}``: ejkernel's alias of state_space_v1.\n\n    " + state_space_v1.__doc__
    alias.op = "state_space_v1"
    return alias


ssm1 = _alias("ssm1")
mamba1 = _alias("mamba1")
WRAPPERS = (state_space_v1, ssm1, mamba1)

# Each differentiable input and its gradient among the backward op's outputs.
_GRADIENT_OF = {"x": "dx", "a": "da", "b": "db", "c": "dc", "d": "dd", "dt": "ddt", "gate": "dgate",
                "initial_state": "d_initial_state"}


def _backward(call, shape, inputs, scalars, grads):
    """The backward op on the forward's inputs and the outputs' gradients."""
    result = call("state_space_v1_backward", **inputs, d_y=grads["y"], d_final_state=grads.get("final_state"))
    return {name: result[d] for name, d in _GRADIENT_OF.items() if name in inputs}


GRADIENTS = {"state_space_v1": _backward}

# Tensors without the batch dim; a or d mapped, and the backward (whose da and dd sum over the
# batch), map one example at a time.
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


VMAP = {"state_space_v1": _vmap, "state_space_v1_backward": _vmap_backward}
