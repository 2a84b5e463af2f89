"""gla_attention, with ``ejkernel.modules.gla_attention``'s signature: recurrent_attention with
the g gate (per key channel, or per head as the seed's Triton reads it) and g_gamma (per head),
differentiable through recurrent_attention_backward."""
from .recurrent_attention import head_gate


def gla_attention(fw, query, key, value, g=None, g_gamma=None, initial_state=None, cu_seqlens=None, /, *,
                  softmax_scale=None, reverse=False, return_state=False, platform=None, cfg=None):
    """Gated linear attention (GLA), as ``ejkernel.modules.gla_attention``; differentiable.

    Per sequence and head, a float32 state S [K, V] (from initial_state, else zeros) walks the
    tokens with log-space gates: S = diag(exp(g_t + g_gamma[h])) S + k_t v_t^T, and
    o_t = (scale q_t)^T S_t, read after the token's own update.

    Args:
      query, key: [B, T, H, K]; packed varlen (with cu_seqlens): [T, H, K] or [1, T, H, K].
      value: [B, T, H, V] (varlen [T, H, V] or [1, T, H, V]). float32, bfloat16 or float16.
      g: [B, T, H, K] log decays of the state's rows (the key dim), in query's dtype; or
        [B, T, H] (varlen [T, H] or [1, T, H]), one per token and head (simple GLA).
      g_gamma: float32 [H], a log decay per head at every token (not differentiated).
      initial_state: float32 [B, H, K, V] (varlen [N, H, K, V]: one per sequence); default zeros.
      cu_seqlens: int32 [N + 1], packed varlen: start of each sequence, from 0, non-decreasing,
        ending at T.
      softmax_scale: multiplies q (default 1/sqrt(K)).
      reverse: walk every sequence from its last token to its first.
      return_state: also return the final state.
      platform ("auto" or None), cfg: None only.

    Returns:
      o [B, T, H, V] (value's shape, query's dtype); with return_state, (o, final_state), the
      latter float32 [B, H, K, V] (varlen [N, H, K, V]). Gradients reach query, key, value, g
      and initial_state.
    """
    fw.refuse("gla_attention", platform=platform not in (None, "auto"))
    return_state = fw.scalar("return_state", return_state, "bool")
    tensors = dict(q=fw.array("query", query), k=fw.array("key", key), v=fw.array("value", value),
                   g=fw.array("g", g), g_gamma=fw.array("g_gamma", g_gamma),
                   initial_state=fw.array("initial_state", initial_state), cu_seqlens=fw.array("cu_seqlens", cu_seqlens))
    head_gate(tensors)
    result = fw.call("recurrent_attention", cfg=cfg, **tensors, softmax_scale=softmax_scale, reverse=reverse)
    return (result["o"], result["final_state"]) if return_state else result["o"]


WRAPPERS = (gla_attention,)
