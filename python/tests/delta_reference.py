"""The gated delta rule from its definition (specs/gated_delta_rule.yaml), token by token, in any
array library with sqrt, exp, clip, where, einsum and stack: NumPy float64 for the forward checks,
float64 JAX for gradients by its autodiff."""


def gated_delta_rule(xp, q, k, v, beta, decay=None, seg_ids=None, initial_state=None, softmax_scale=None,
                     use_qk_l2norm=True):
    """(o [B, T, H, V], final_state [B, H, K, V]) in q's dtype (pass float64)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if softmax_scale is None else softmax_scale
    if use_qk_l2norm:
        q = q / xp.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / xp.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    q = q * scale
    state = xp.zeros((B, H, K, V), dtype=q.dtype) if initial_state is None else initial_state
    outs = []
    for t in range(T):
        if decay is not None:
            state = state * xp.exp(xp.clip(decay[:, t], -20.0, 20.0))[:, :, None, None]
        if seg_ids is not None and t > 0:
            keep = (seg_ids[:, t] == seg_ids[:, t - 1])[:, None, None, None]
            state = xp.where(keep, state, 0.0)
        u = xp.einsum("bhkv,bhk->bhv", state, k[:, t])
        d = beta[:, t][..., None] * (v[:, t] - u)
        state = state + k[:, t][..., None] * d[:, :, None, :]
        outs.append(xp.einsum("bhkv,bhk->bhv", state, q[:, t]))
    o = xp.stack(outs, 1) if outs else xp.zeros((B, 0, H, V), dtype=q.dtype)
    return o, state
