"""flash_attention's mask_info= with packed varlen (cum_seqlens_q/k): the MaskInfo describes the
packed tokens (batch 1, [1, Tq, Tk], positions counted over the packing, as the seed's XLA path
reads a dense mask next to cum_seqlens), ANDed with the varlen structure: a query sees only its
own sequence's keys, and the call's causal / sliding_window count positions within the sequence.

Lowered in Python to one dense call of batch 1: the sequences become segment labels (combined with
the MaskInfo's own), the MaskInfo's band stays the kernel's band, and what only a per-sequence
position says (causal or a window when the query and key packings differ) joins the dense term.
The kernel then spans every packed pair (Tq x Tk, less what the band skips) instead of each
sequence's own: the price of a mask over the packed tokens, whose dense term is that size too.
Rejected: reading the mask inside the varlen kernels (cheap to index, but four kernels, forward
and backward on CPU and CUDA, for what a relabelling says exactly)."""
from .. import _kit
from ..types.structure import relabel


def _sequences(xp, cu, length, like):
    """Each packed token's sequence index ([1, length] int32; -1 past the last sequence) and its
    position within it ([length])."""
    t = xp.arange(length, xp.int32, like=like)
    seq = xp.astype(xp.sum(t[:, None] >= cu[None, 1:], axis=-1), xp.int32)
    start = xp.take_along(cu, xp.clip(seq, 0, max(cu.shape[0] - 1, 0)), axis=0)
    return xp.where(seq < cu.shape[0] - 1, seq, -1)[None], t - start


def _local_band(xp, causal, window, pos_q, pos_k, like):
    """[Tq, Tk]: causal and window in positions within the sequence."""
    keep = xp.ones((pos_q.shape[0], pos_k.shape[0]), xp.bool_, like=like)
    q, k = pos_q[:, None], pos_k[None, :]
    if causal:
        keep = keep & (k <= q)
    if window is not None:
        keep = keep & (k >= q - window[0]) & (k <= q + window[1])
    return keep


def _bounds(fw, cum_q, cum_k):
    """The two cum_seqlens, checked as the varlen mode checks their shapes (their values are
    not read: that would wait for the device)."""
    if cum_k is None:
        raise ValueError("cum_seqlens_k: required with cum_seqlens_q (varlen mode)")
    for name, cu in (("cum_seqlens_q", cum_q), ("cum_seqlens_k", cum_k)):
        if len(cu.shape) != 1 or fw.dtype_name(cu) != "int32" or cu.shape[0] < 1:
            raise ValueError(f"{name}: expected int32 [N + 1], got {fw.dtype_name(cu)} {list(cu.shape)}")
    if cum_q.shape[0] != cum_k.shape[0]:
        raise ValueError(f"cum_seqlens_k: expected {cum_q.shape[0]} entries (cum_seqlens_q's), got {cum_k.shape[0]}")
    return cum_q, cum_k


def lower(fw, mask_info, tensors, scalars, band_of):
    """tensors and scalars of a varlen call with mask_info, made those of the equivalent dense
    call of batch 1 (q, k, v given a leading 1; the MaskInfo's band combined with the call's by
    band_of, flash_attention's _band); returns whether q was [Tq, Hq, D]."""
    if "bias" in tensors:
        raise ValueError("bias: not supported with cum_seqlens_q (varlen mode), with mask_info as without")
    if scalars.get("dropout_prob"):
        raise NotImplementedError("dropout_prob: not with mask_info and packed varlen in ejkernel (C++) (the keep "
                                  "decisions would be those of the packed batch, not of each sequence)")
    lowered = _kit.lower_mask_info(mask_info)
    causal = fw.scalar("causal", scalars["causal"], "bool")
    xp = mask_info.xp
    q, k = tensors["q"], tensors["k"]
    three_d = len(q.shape) == 3
    tq, tk = q.shape[-3], k.shape[-3]
    if tuple(mask_info.shape) != (1, tq, tk):
        raise ValueError(f"mask_info: with packed varlen, expected a MaskInfo over the packed tokens, of shape "
                         f"(1, {tq}, {tk}) (batch 1, Tq, Tk), got {tuple(mask_info.shape)}")
    cum_q, cum_k = _bounds(fw, tensors.pop("cum_seqlens_q"), tensors.pop("cum_seqlens_k", None))
    like = mask_info._like()
    seq_q, pos_q = _sequences(xp, xp.asarray(cum_q, xp.int32, like=like), tq, like)
    seq_k, pos_k = _sequences(xp, xp.asarray(cum_k, xp.int32, like=like), tk, like)
    labels = (seq_q, seq_k)
    if lowered.q_segment_ids is not None:
        labels = relabel(xp, lowered.q_segment_ids, lowered.kv_segment_ids, seq_q, seq_k, cum_q.shape[0])
    dense = lowered.attention_mask
    window = scalars["sliding_window"]
    if cum_q is not cum_k and (causal or window is not None):
        # Positions within a sequence are no band over the packing unless both packings are one
        # (the same array given twice; equal values in two arrays take this path, as exact).
        window = None if window is None else _kit.scalar("sliding_window", window, "i64[2]")
        local = _local_band(xp, causal, window, pos_q, pos_k, like)
        dense = local[None, None] if dense is None else dense & local[None, None]
        causal, window = False, None
    for name in ("max_seqlen_q", "max_seqlen_k"):  # bounds of the varlen grid only
        scalars.pop(name, None)
    for name in ("q", "k", "v"):
        if len(tensors[name].shape) == 3:
            tensors[name] = tensors[name][None]
    tensors["q_segment_ids"], tensors["kv_segment_ids"] = (fw.adopt(x, tensors["q"]) for x in labels)
    if dense is not None:
        tensors["attention_mask"] = fw.adopt(xp.astype(dense, xp.uint8), tensors["q"])
    scalars["causal"], scalars["sliding_window"] = causal, window
    if lowered.band != (None, None) or causal or window is not None:
        scalars["causal"], scalars["sliding_window"] = band_of(lowered.band, causal, window, tk)
    return three_d
