"""lightning_attention, with ``ejkernel.modules.lightning_attention``'s signature:
recurrent_attention with a fixed log decay per head, differentiable through
recurrent_attention_backward."""
import numpy as np


def lightning_decay(num_heads, layer_idx, num_layers):
    """The per-head log decay, float32 [H]: -(8 / H) * (1 - layer_idx / num_layers) * h."""
    return (-(8 / num_heads * (1 - layer_idx / num_layers)) * np.arange(num_heads, dtype=np.float32)).astype(
        np.float32)


def _as_array(fw, like, values):
    """values (NumPy) as an array of the framework, on like's device."""
    if fw.name == "torch":
        import torch
        return torch.as_tensor(values, device=like.device)
    import jax.numpy as jnp
    return jnp.asarray(values)


def lightning_attention(fw, query, key, value, initial_state=None, cu_seqlens=None, /, *, layer_idx, num_layers,
                        softmax_scale=None, reverse=False, return_state=False, platform=None, cfg=None):
    """Lightning attention, as ``ejkernel.modules.lightning_attention``; differentiable.

    Linear attention whose float32 state S [K, V] per sequence and head decays by a constant
    per head: S = exp(gamma_h) S + k_t v_t^T, o_t = (scale q_t)^T S_t (after the token's own
    update), with gamma_h = -(8 / H) * (1 - layer_idx / num_layers) * h: head 0 keeps all.

    Args:
      query, key: [B, T, H, K]; packed varlen (with cu_seqlens): [T, H, K] or [1, T, H, K].
      value: [B, T, H, V] (varlen [T, H, V] or [1, T, H, V]). float32, bfloat16 or float16.
      initial_state: float32 [B, H, K, V] (varlen [N, H, K, V]: one per sequence); default zeros.
      cu_seqlens: int32 [N + 1], packed varlen: start of each sequence, from 0, non-decreasing,
        ending at T.
      layer_idx, num_layers: ints (num_layers > 0) that set the decay.
      softmax_scale: multiplies q (default 1/sqrt(K)).
      reverse: walk every sequence from its last token to its first.
      return_state: also return the final state.
      platform ("auto" or None), cfg: None only.

    Returns:
      o [B, T, H, V] (value's shape, query's dtype); with return_state, (o, final_state), the
      latter float32 [B, H, K, V] (varlen [N, H, K, V]). Gradients reach query, key, value and
      initial_state.
    """
    fw.refuse("lightning_attention", platform=platform not in (None, "auto"))
    return_state = fw.scalar("return_state", return_state, "bool")
    layer_idx = fw.scalar("layer_idx", layer_idx, "i64")
    num_layers = fw.scalar("num_layers", num_layers, "i64")
    if num_layers <= 0:
        raise ValueError(f"num_layers: must be positive, got {num_layers}")
    query = fw.array("query", query)
    if query.ndim not in (3, 4):
        raise ValueError(f"query: expected [B, T, H, K] or packed [T, H, K], got {query.ndim} dims")
    gamma = _as_array(fw, query, lightning_decay(query.shape[-2], layer_idx, num_layers))
    result = fw.call("recurrent_attention", cfg=cfg, q=query, k=fw.array("key", key), v=fw.array("value", value),
                     g_gamma=gamma, initial_state=fw.array("initial_state", initial_state),
                     cu_seqlens=fw.array("cu_seqlens", cu_seqlens), softmax_scale=softmax_scale, reverse=reverse)
    return (result["o"], result["final_state"]) if return_state else result["o"]


WRAPPERS = (lightning_attention,)
