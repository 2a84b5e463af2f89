"""state_space_v1 from its definition (specs/state_space_v1.yaml), token by token, in any array
library with exp, einsum and stack: NumPy float64 for the forward checks, float64 torch and JAX
for gradients by their autodiff."""


def state_space_v1(xp, x, A, B, C, D, dt, gate=None, initial_state=None):
    """(y, final_state) in x's dtype (pass float64): x, dt [b, s, d]; A [d, N]; B, C [b, s, N]."""
    b, s, d = x.shape
    h = xp.zeros((b, d, A.shape[-1]), dtype=x.dtype) if initial_state is None else initial_state
    ys = []
    for t in range(s):
        step = dt[:, t][..., None]
        h = xp.exp(A[None] * step) * h + (step * x[:, t][..., None]) * B[:, t][:, None, :]
        ys.append(xp.einsum("bdn,bn->bd", h, C[:, t]) + D[None] * x[:, t])
    y = xp.stack(ys, 1) if ys else xp.zeros((b, 0, d), dtype=x.dtype)
    if gate is not None:
        y = y * gate / (1 + xp.exp(-gate))
    return y, h
