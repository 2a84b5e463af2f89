"""state_space_v2 from the seed's definition (SEED_OPS.md 4.18), token by token, in any array
library with exp, einsum, stack, repeat-free indexing and sqrt: NumPy float64 for the forward,
float64 torch and JAX for gradients by their autodiff."""


def state_space_v2(xp, x, A, B, C, D, dt, gate=None, initial_state=None, use_gated_rmsnorm=False, eps=1e-5):
    """(y [b, s, H P], final_state [b, H, P, N]) in x's dtype (pass float64)."""
    b, s, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    group = [h // (H // G) for h in range(H)]
    Bh, Ch = B[:, :, group], C[:, :, group]  # [b, s, H, N]
    st = xp.zeros((b, H, P, N), dtype=x.dtype) if initial_state is None else initial_state
    ys = []
    for t in range(s):
        e = xp.exp(A[None] * dt[:, t])[:, :, None, None]
        st = e * st + (dt[:, t][:, :, None] * x[:, t])[..., None] * Bh[:, t][:, :, None, :]
        ys.append(xp.einsum("bhpn,bhn->bhp", st, Ch[:, t]) + D[None, :, None] * x[:, t])
    y = (xp.stack(ys, 1) if ys else xp.zeros((b, 0, H, P), dtype=x.dtype)).reshape(b, s, H * P)
    if gate is not None:
        act = gate / (1 + xp.exp(-gate))
        if use_gated_rmsnorm:
            y = y / xp.sqrt((y * y).mean(-1)[..., None] + eps)
        y = y * act
    return y, st
