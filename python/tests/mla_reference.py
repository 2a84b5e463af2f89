"""Multi-head latent attention (flash_mla) in float64 jax.numpy, straight from its definition:
the seed's three logit modes, scale, soft cap, window, causal, bias or boolean mask, sinks."""
import jax
import jax.numpy as jnp
import numpy as np


def flash_mla(q, kv, w_kc, w_vc, b_q=None, b_k=None, softmax_scale=None, causal=False, attention_mask=None,
              bias=None, softmax_aux=None, logits_soft_cap=None, sliding_window=None):
    """out [B, T, Hq, d_v]; every input float64 (call under jax.enable_x64)."""
    hq, hkv = q.shape[2], w_kc.shape[1]
    k = jnp.repeat(jnp.einsum("btr,rhd->bthd", kv, w_kc), hq // hkv, axis=2)
    v = jnp.repeat(jnp.einsum("btr,rhd->bthd", kv, w_vc), hq // hkv, axis=2)
    d_nope = w_kc.shape[2]
    s = jnp.einsum("bqhd,bkhd->bhqk", q[..., :d_nope], k)
    width = d_nope
    if b_k is not None:
        width += b_k.shape[2]
        rope_q = q[..., d_nope:] if b_q is None else jnp.broadcast_to(b_q[:, :, None], (*q.shape[:3], b_q.shape[2]))
        s = s + jnp.einsum("bqhd,bkd->bhqk", rope_q, b_k)
    s = s * (width ** -0.5 if softmax_scale is None else softmax_scale)
    if logits_soft_cap is not None:
        s = logits_soft_cap * jnp.tanh(s / logits_soft_cap)
    t = q.shape[1]
    qi, ki = np.arange(t)[:, None], np.arange(t)[None, :]
    visible = np.ones((t, t), bool)
    if sliding_window is not None:
        left, right = (sliding_window, sliding_window) if isinstance(sliding_window, int) else sliding_window
        visible &= (ki >= qi - left) & (ki <= qi + right)
    if causal:
        visible &= ki <= qi
    low = np.finfo(np.float32).min
    s = jnp.where(visible, s, low)
    if bias is not None:
        s = s + bias
    elif attention_mask is not None:
        s = jnp.where(attention_mask, s, low)
    if softmax_aux is not None:
        aux = softmax_aux[:, None] if softmax_aux.ndim == 1 and softmax_aux.shape[0] == hq else softmax_aux
        aux = jnp.broadcast_to(aux if aux.ndim == 2 else aux[None], (hq, aux.shape[-1]))
        full = jnp.concatenate([s, jnp.broadcast_to(aux[None, :, None], (*s.shape[:3], aux.shape[1]))], -1)
        p = jax.nn.softmax(full, axis=-1)[..., :t]
    else:
        p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)
