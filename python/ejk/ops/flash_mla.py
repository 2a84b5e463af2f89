"""flash_mla, with ``ejkernel.modules.flash_mla``'s signature (0.0.80.3): multi-head latent
attention for training. K and V are up-projected from the latent (kv @ w_kc, kv @ w_vc, in
float32), the rope parts are concatenated to q and K per the seed's three logit modes, and
ejkernel (C++)'s flash_attention runs on the result, so the gradient is flash_attention's
custom VJP plus the framework's autodiff of the projections and concatenations."""
import numpy as np

from . import flash_attention as _flash

_MIN = float(np.finfo(np.float32).min)  # the seed's masked logit


def _xp(fw):
    """The framework's array namespace (jax.numpy or torch): einsum, concatenate, broadcast_to
    and where are spelled alike in both."""
    if fw.name == "torch":
        import torch
        return torch
    import jax.numpy as jnp
    return jnp


def flash_mla(fw, query, key_value, w_kc, w_vc, b_q=None, b_k=None, cu_seqlens=None, /, *, softmax_scale=None,
              causal=False, attention_mask=None, bias=None, softmax_aux=None, logits_soft_cap=None,
              deterministic=True, dropout_rng=None, dropout_prob=0.0, sliding_window=None, softmax_dtype=None,
              platform=None, cfg=None):
    """Multi-head latent attention (training path), as ``ejkernel.modules.flash_mla``{on};
    differentiable.

    K = key_value @ w_kc and V = key_value @ w_vc (per kv head, float32, then query's dtype);
    logits by the seed's modes: no b_k: q.K (query [.., d_nope]); b_k only: q_nope.K +
    q_rope.b_k (query [.., d_nope + d_rope]); b_q and b_k: q.K + b_q.b_k (query [.., d_nope]).
    b_q without b_k is unused, as in the seed. The logits are scaled, soft-capped, masked
    (window, causal), biased, and softmaxed with any sinks; out = softmax @ V.

    Args:
      query: [B, T, Hq, Dq] (float32, bfloat16 or float16; the kernels' dtype). Packed varlen
        (with cu_seqlens): [1, T, Hq, Dq].
      key_value: [B, T, r], the latent; w_kc: [r, Hkv, d_nope]; w_vc: [r, Hkv, d_v]; Hq a
        multiple of Hkv (GQA). Any float dtypes (the projections run in float32).
      b_q, b_k: [B, T, d_rope], rope parts shared by every head.
      cu_seqlens: int32 [N + 1], packed varlen (batch 1): start of each sequence, from 0,
        ending at T; causal and sliding_window count within each sequence (the seed refuses
        cu_seqlens). Not with bias or attention_mask.
      softmax_scale: multiplies the logits (default 1/sqrt(d_nope [+ d_rope])).
      causal: key k is visible from query q only if k <= q.
      attention_mask: bool [B|1, Hq|1, T, T], used only when bias is None: False gives the
        logit float32's min, as the seed does. Not with logits_soft_cap.
      bias: [B|1, Hq|1, T, T], added to the logits (after the soft cap in the seed, so not
        with logits_soft_cap here: the kernel adds it before).
      softmax_aux: sinks: [S] shared by every head, [Hq] one per head, [1, S] or [Hq, S].
      logits_soft_cap: cap > 0: logits become cap * tanh(logits / cap).
      deterministic, dropout_rng, dropout_prob: dropout (deterministic=False with
        dropout_prob > 0) is NotImplementedError; otherwise unused.
      sliding_window: int w, meaning (w, w), or (left, right): keys in [q - left, q + right].
      softmax_dtype: any float dtype: the softmax always runs in float32.
      platform: None or "auto" (where the arrays are), "cpu", "cuda"; the seed's "xla" is
        "auto", "triton" is "cuda".
      cfg: flash_attention's tuning values (e.g. dict(block_q=64, block_k=128)), or None.

    Returns:
      out [B, T, Hq, d_v], query's dtype. Gradients reach query, key_value, w_kc, w_vc, b_q,
      b_k, bias and softmax_aux. Where d_v differs from the q/K width, the narrower of V and
      q/K is zero-padded to the other (exact; its cost is the padded width in the kernel).
    """
    fw.refuse("flash_mla", dropout_prob=not deterministic and dropout_prob > 0.0)
    if softmax_dtype is not None and not fw.is_float_dtype(softmax_dtype):
        raise ValueError(f"softmax_dtype: expected a floating dtype, got {softmax_dtype!r}")
    xp = _xp(fw)
    q, kv = fw.array("query", query), fw.array("key_value", key_value)
    w_kc, w_vc = fw.array("w_kc", w_kc), fw.array("w_vc", w_vc)
    b_q, b_k = fw.array("b_q", b_q), fw.array("b_k", b_k)
    _check_shapes(q, kv, w_kc, w_vc, b_q, b_k)
    if bias is None and attention_mask is not None:
        mask = fw.array("attention_mask", attention_mask)
        # The seed's float32 min, as low as query's dtype goes (float16's cast would be -inf).
        bias = xp.where(mask != 0, 0.0, max(_MIN, float(xp.finfo(q.dtype).min)))
    if bias is not None and logits_soft_cap is not None:
        raise NotImplementedError("bias, attention_mask: not with logits_soft_cap in ejkernel (C++): the seed adds "
                                  "them after the soft cap, the flash kernel before it")
    dtype = fw.dtype_name(q)
    k, v = (fw.cast_float(xp.einsum("btr,rhd->bthd", fw.cast_float(kv, "float32"), fw.cast_float(w, "float32")),
                          dtype) for w in (w_kc, w_vc))
    q, k, width = _logit_operands(fw, xp, q, k, b_q, b_k, dtype)
    scale = width ** -0.5 if softmax_scale is None else softmax_scale
    d_v = v.shape[-1]
    d = max(q.shape[-1], d_v)
    q, k, v = (x if x.shape[-1] == d else fw.pad_last(x, d) for x in (q, k, v))
    if softmax_aux is not None:
        softmax_aux = _sinks(fw, xp, fw.array("softmax_aux", softmax_aux), q.shape[2])
    varlen = dict(cum_seqlens_q=cu_seqlens, cum_seqlens_k=cu_seqlens) if cu_seqlens is not None else {}
    out = _flash.flash_attention(fw, q, k, v, bias, varlen.get("cum_seqlens_q"), varlen.get("cum_seqlens_k"),
                                 softmax_aux, softmax_scale=scale, causal=causal, sliding_window=sliding_window,
                                 logits_soft_cap=logits_soft_cap, platform=platform, cfg=cfg)
    return out if d == d_v else out[..., :d_v]


def _check_shapes(q, kv, w_kc, w_vc, b_q, b_k):
    """The seed's shape rules, each error naming the argument."""
    if q.ndim != 4:
        raise ValueError(f"query: expected [B, T, Hq, Dq], got shape {tuple(q.shape)}")
    if kv.ndim != 3 or tuple(kv.shape[:2]) != tuple(q.shape[:2]):
        raise ValueError(f"key_value: expected [B, T, r] with query's B and T {tuple(q.shape[:2])}, got shape "
                         f"{tuple(kv.shape)}")
    for name, w in (("w_kc", w_kc), ("w_vc", w_vc)):
        if w.ndim != 3 or w.shape[0] != kv.shape[2] or w.shape[1] != w_kc.shape[1]:
            raise ValueError(f"{name}: expected [r, Hkv, d] with r = {kv.shape[2]} (key_value's) and w_kc's Hkv, "
                             f"got shape {tuple(w.shape)}")
    if q.shape[2] % w_kc.shape[1] != 0:
        raise ValueError(f"query: its {q.shape[2]} heads are not a multiple of w_kc's {w_kc.shape[1]} kv heads")
    d_nope = w_kc.shape[2]
    if b_k is not None and (b_k.ndim != 3 or tuple(b_k.shape[:2]) != tuple(q.shape[:2])):
        raise ValueError(f"b_k: expected [B, T, d_rope] with query's B and T {tuple(q.shape[:2])}, got shape "
                         f"{tuple(b_k.shape)}")
    if b_k is not None and b_q is not None and tuple(b_q.shape) != tuple(b_k.shape):
        raise ValueError(f"b_q: expected b_k's shape {tuple(b_k.shape)} ([B, T, d_rope]), got {tuple(b_q.shape)}")
    want = d_nope + b_k.shape[2] if b_k is not None and b_q is None else d_nope
    if q.shape[3] != want:
        mode = ("without b_k" if b_k is None else "with b_k and b_q" if b_q is not None
                else "with b_k only ([nope | rope])")
        raise ValueError(f"query: its head dim must be {want} {mode}, got {q.shape[3]}")


def _logit_operands(fw, xp, q, k, b_q, b_k, dtype):
    """q and K whose dot is the seed's logit in each mode, and their width (the default scale's
    1/sqrt): the rope parts, shared by every head, are broadcast and concatenated."""
    if b_k is None:
        return q, k, q.shape[-1]
    rope_k = xp.broadcast_to(fw.cast_float(b_k, dtype)[:, :, None, :], (*k.shape[:3], b_k.shape[-1]))
    k = xp.concatenate([k, rope_k], -1)
    if b_q is not None:
        rope_q = xp.broadcast_to(fw.cast_float(b_q, dtype)[:, :, None, :], (*q.shape[:3], b_q.shape[-1]))
        q = xp.concatenate([q, rope_q], -1)
    return q, k, k.shape[-1]


def _sinks(fw, xp, aux, heads):
    """The seed's sink shapes as the kernel's: [S] shared, [Hq] one per head (the seed reads a
    length of Hq so), [1, S] shared, [Hq, S] per head."""
    if aux.ndim == 1 and aux.shape[0] == heads:
        return aux[:, None]
    if aux.ndim == 2 and aux.shape[0] == 1:
        return aux[0]
    if aux.ndim > 2 or (aux.ndim == 2 and aux.shape[0] != heads):
        raise ValueError(f"softmax_aux: expected [S], [{heads}], [1, S] or [{heads}, S], got shape {tuple(aux.shape)}")
    return aux


WRAPPERS = (flash_mla,)
DOCS = {"jax": {}, "torch": {"on": ", on torch tensors"}}
