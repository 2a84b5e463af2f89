"""recurrent_attention from its definition (specs/recurrent_attention.yaml), token by token, in
any array library with exp, einsum, stack and concatenate: NumPy float64 for the forward checks,
float64 torch and JAX for gradients by their autodiff."""


def _sequence(xp, q, k, v, g, g_gamma, gk, gv, state, scale, reverse):
    """One batch of equal-length sequences: tokens [B, L, H, *], state [B, H, K, V]."""
    outs = [None] * q.shape[1]
    steps = range(q.shape[1] - 1, -1, -1) if reverse else range(q.shape[1])
    for t in steps:
        rows = 0.0  # the log decay of the state's rows
        if g is not None:  # [B, L, H, K], or [B, L, H]: one value for every row
            rows = rows + (g[:, t] if len(g.shape) == len(q.shape) else g[:, t][..., None])
        if g_gamma is not None:
            rows = rows + g_gamma[None, :, None]
        if gk is not None:
            rows = rows + gk[:, t]
        if g is not None or g_gamma is not None or gk is not None:
            state = state * xp.exp(rows)[..., None]
        if gv is not None:
            state = state * xp.exp(gv[:, t])[:, :, None, :]
        state = state + k[:, t][..., None] * v[:, t][:, :, None, :]
        outs[t] = scale * xp.einsum("bhk,bhkv->bhv", q[:, t], state)
    return outs, state


def recurrent_attention(xp, q, k, v, g=None, g_gamma=None, gk=None, gv=None, initial_state=None, cu_seqlens=None,
                        softmax_scale=None, reverse=False):
    """(o, final_state) in q's dtype (pass float64). Dense: q [B, T, H, K]; varlen: q [1, T, H, K]
    with cu_seqlens (a list of ints), initial_state [N, H, K, V]."""
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    B, T, H, K = q.shape
    V = v.shape[-1]
    spans = [(0, T)] * B if cu_seqlens is None else list(zip(cu_seqlens[:-1], cu_seqlens[1:]))
    outs, finals = [], []
    for n, (a, b) in enumerate(spans):
        row = n if cu_seqlens is None else 0
        tok = lambda x: None if x is None else x[row:row + 1, a:b]  # noqa: E731
        state = xp.zeros((1, H, K, V), dtype=q.dtype) if initial_state is None else initial_state[n:n + 1]
        o, state = _sequence(xp, tok(q), tok(k), tok(v), tok(g), g_gamma, tok(gk), tok(gv), state, scale, reverse)
        outs.append(xp.stack(o, 1) if o else xp.zeros((1, 0, H, V), dtype=q.dtype))
        finals.append(state)
    o = xp.concatenate(outs, 0) if cu_seqlens is None else xp.concatenate(outs, 1)
    return o, xp.concatenate(finals, 0)
