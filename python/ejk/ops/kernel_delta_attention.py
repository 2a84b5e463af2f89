"""kernel_delta_attention (alias kda_attention) and kda_decay, with ``ejkernel.modules``'
signatures: the gated delta rule with a free softmax_scale, differentiable through
gated_delta_rule_backward."""
from .gated_delta_rule import _cast


def kernel_delta_attention(fw, query, key, value, beta, decay=None, initial_state=None, /, *, softmax_scale=None,
                           chunk_size=64, use_qk_l2norm=True, use_chunked=True, return_state=False, platform=None,
                           cfg=None):
    """Kernel delta attention (KDA), as ``ejkernel.modules.kernel_delta_attention``; differentiable.

    Per sequence and head, a float32 state S [K, V] (from initial_state, else zeros) walks the
    tokens. With use_qk_l2norm, q and k are divided by sqrt(sum x^2 + 1e-6); q is then scaled by
    softmax_scale. Per token: S = exp(decay_t) S; u = S^T k; S += k (beta_t (v - u))^T;
    o = S^T q (after the token's own update). Decay arguments are clamped to [-20, 20].

    Args:
      query, key: [B, T, H, K]; value: [B, T, H, V]. float32, bfloat16 or float16.
      beta: [B, T, H], in query's dtype: the write strength.
      decay: [B, T, H] log decays, one per head (kda_decay makes them); default none.
      initial_state: [B, H, K, V] (taken as float32); default zeros.
      softmax_scale: multiplies q (default 1/sqrt(K)).
      chunk_size (a positive int), use_chunked: accepted; the recurrence is exact either way.
      use_qk_l2norm: L2-normalize q and k first (default True).
      return_state: also return the final state.
      platform ("auto" or None), cfg: None only.

    Returns:
      o [B, T, H, V] in float32 (as the seed's XLA path); with return_state, (o, final_state),
      final_state float32 [B, H, K, V]. Gradients reach query, key, value, beta, decay and
      initial_state.
    """
    fw.refuse("kernel_delta_attention", platform=platform not in (None, "auto"))
    return_state = fw.scalar("return_state", return_state, "bool")
    fw.scalar("use_chunked", use_chunked, "bool")
    if fw.scalar("chunk_size", chunk_size, "i64") <= 0:
        raise ValueError(f"chunk_size: must be positive, got {chunk_size}")
    result = fw.call("gated_delta_rule", cfg=cfg, q=fw.array("query", query), k=fw.array("key", key),
                     v=fw.array("value", value), beta=fw.array("beta", beta), decay=fw.array("decay", decay),
                     initial_state=_cast(fw, fw.array("initial_state", initial_state), "float32"),
                     softmax_scale=softmax_scale, use_qk_l2norm=use_qk_l2norm)
    o = _cast(fw, result["o"], "float32")
    return (o, result["final_state"]) if return_state else o


def kda_attention(fw, query, key, value, beta, decay=None, initial_state=None, /, *, softmax_scale=None, chunk_size=64,
                  use_qk_l2norm=True, use_chunked=True, return_state=False, platform=None, cfg=None):
    """kernel_delta_attention under the seed's alias."""
    return kernel_delta_attention(fw, query, key, value, beta, decay, initial_state, softmax_scale=softmax_scale,
                                  chunk_size=chunk_size, use_qk_l2norm=use_qk_l2norm, use_chunked=use_chunked,
                                  return_state=return_state, platform=platform, cfg=cfg)


def kda_decay(fw, gate, A_log, dt_bias):
    """KDA's per-head log decay, as ``ejkernel.modules.kda_decay``: float32
    -exp(A_log) * softplus(gate + dt_bias), gate [B, T, H], A_log and dt_bias [H]."""
    gate, A_log, dt_bias = (_cast(fw, fw.array(n, x), "float32") for n, x in
                            (("gate", gate), ("A_log", A_log), ("dt_bias", dt_bias)))
    if fw.name == "torch":
        import torch
        return -torch.exp(A_log) * torch.nn.functional.softplus(gate + dt_bias)
    import jax
    import jax.numpy as jnp
    return -jnp.exp(A_log) * jax.nn.softplus(gate + dt_bias)


WRAPPERS = (kernel_delta_attention, kda_attention, kda_decay)
