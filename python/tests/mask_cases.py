"""MaskInfo cases shared by test_mask_info.py and the seed's side (seed_masks.py): each builds
a MaskInfo from `types` (ejk.types or ejkernel.types) on fixed random inputs (seeded numpy)."""
import numpy as np

B, Q, K = 2, 12, 12


def _segments(rng, n):
    ids = np.sort(rng.integers(0, 3, size=(B, n)), axis=1).astype(np.int32)
    ids[:, -2:] = -1  # padding at the end
    return ids


def _inputs():
    rng = np.random.default_rng(7)
    seg = _segments(rng, Q)
    pad = (rng.random((B, Q)) > 0.2).astype(np.int32)
    dense3 = rng.random((B, Q, K)) > 0.4
    tt = rng.integers(0, 3, size=(B, Q)).astype(np.int32)
    return seg, pad, dense3, tt


def cases(types):
    """name -> a function building the MaskInfo."""
    M = types.MaskInfo
    seg, pad, dense3, tt = _inputs()
    cu = np.array([0, 9, 2, 12], np.int32)  # interleaved (start, end) per row
    return {
        "segments": lambda: M.from_segments(seg),
        "segments-is-attn-mask": lambda: M.from_segments(pad, is_attn_mask=True),
        "padding-2d": lambda: M.from_attention_mask(pad),
        "padding-2d-inverted": lambda: M.from_attention_mask(1 - pad, mask_is_valid=False),
        "dense-3d": lambda: M.from_attention_mask(dense3),
        "dense-4d-segments": lambda: M.from_attention_mask(np.asarray(M.from_segments(seg).attention_mask)),
        "cu-seqlens": lambda: M.from_cu_seqlens(cu, max_q_len=Q),
        "causal": lambda: M.from_segments(seg).apply_causal(),
        "causal-offset": lambda: M.from_segments(seg).apply_causal(offset=2),
        "causal-batch-offset": lambda: M.from_segments(seg).apply_causal(offset=np.array([0, 3], np.int32)),
        "window": lambda: M.from_segments(seg).apply_sliding_window(3),
        "window-pair-causal": lambda: M.from_segments(seg).apply_sliding_window((4, 1)).apply_causal(),
        "window-offset": lambda: M.from_attention_mask(pad).apply_sliding_window((2, 2), offset=1),
        "window-decode": lambda: M.from_segments(seg).apply_sliding_window((3, 0), mode="decode", index=6),
        "window-prefill": lambda: M.from_segments(seg).apply_sliding_window((4, 0), mode="prefill"),
        "chunked": lambda: M.from_segments(seg).apply_chunked(4),
        "chunked-causal": lambda: M.from_attention_mask(pad).apply_chunked(5).apply_causal(),
        "token-types-intersect": lambda: M.from_attention_mask(pad).apply_token_type_ids(tt, combine="intersect"),
        "token-types-union": lambda: M.from_segments(seg).apply_causal().apply_token_type_ids(tt),
        "token-types-replace": lambda: M.from_segments(seg).apply_token_type_ids(tt, combine="replace",
                                                                                 zero_policy="none"),
        "kv-lengths": lambda: M.from_segments(seg).apply_causal().apply_kv_lengths(
            np.array([7, 12], np.int32), q_len=4, end_index=np.array([7, 12], np.int32)),
        "random": lambda: M.from_random(B, Q, K, sparsity=0.3, seed=5),
        "dynamic-init-padding": lambda: M.dynamic_init(attention_mask=pad),
        "dynamic-init-ids": lambda: M.dynamic_init(input_ids=seg),
        "materialized-segment-ids": lambda: M.from_attention_mask(dense3).materialize_segment_ids(),
    }


def results(info):
    """The arrays compared between the seed and ejk: the dense mask, the visible segment ids
    and the positions, and the views' results."""
    info.get_or_compute_segment_ids()  # the seed's MaskInfo keeps the ids it computes, which its views read
    seen = views(info)
    q_ids, kv_ids = info.get_or_compute_segment_ids()
    q_pos, kv_pos = info.get_or_compute_positions()
    out = {"mask": np.asarray(info.get_or_compute_attention_mask()), "q_ids": np.asarray(q_ids),
           "kv_ids": np.asarray(kv_ids), "bias": np.asarray(info.create_bias())}
    if q_pos is not None:
        out["q_pos"], out["kv_pos"] = np.asarray(q_pos), np.asarray(kv_pos)
    return {**out, **seen}


def views(info):
    """The results of the methods that read a MaskInfo (both libraries' names)."""
    out = {name: getattr(info, name) for name in ("q_lens", "kv_lens") if getattr(info, name) is not None}
    q_mask, kv_mask, pair = info.get_qkv_masks()
    cu_q, cu_kv = info.get_or_compute_qkv_cu_seqlens(max_segments=6)
    out |= {"q_attention_mask": info.q_attention_mask, "q_position_ids": info.q_position_ids, "q_mask": q_mask,
           "kv_mask": kv_mask, "pair_mask": pair, "cu_q": cu_q, "cu_kv": cu_kv,
           "self_attention": bool(info.is_self_attention()), "multi_sequence": bool(info.is_multi_sequence),
           "baked_in": [info.baked_in_masks[k] for k in ("causal", "sliding_window", "chunked", "token_type_ids")],
           "float_mask": info.to_dtype(np.float32).attention_mask,
           "materialized": info.materialize_attention_mask().attention_mask,
           "chunked_static": info.create_chunked_attention_mask(4, Q, K, offset=1)}
    return {key: np.asarray(value) for key, value in out.items()}


def assert_same(name, mine, saved):
    """The results of case `name` (results()) equal another library's, from its saved .npz."""
    theirs = {key.split("/", 1)[1]: v for key, v in saved.items() if key.startswith(name + "/")}
    assert set(mine) == set(theirs)
    for key in mine:
        assert mine[key].shape == theirs[key].shape, key
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)
