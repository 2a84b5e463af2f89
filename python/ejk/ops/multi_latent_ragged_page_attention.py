"""multi_latent_ragged_page_attention and _v2, with ``ejkernel.modules``' signatures (0.0.80.3):
multi-head latent attention (DeepSeek's MLA decode path) over a paged latent cache, mixed
prefill and decode in one call, that first writes this call's latent rows into the cache.

The cache is ``[P, page_size / pack, pack, align128(R) + align128(E)]`` (pack = 32 / bits: 1 for
float32, 2 for 16-bit types), a row ``[c, 0 pad, k_pe, 0 pad]``; slot j of a page is row j
once the middle axes are flattened. The write is one scatter of the framework's (in place in
torch, and in JAX where the caller donates the cache); the attention is the op of
specs/multi_latent_ragged_page_attention.yaml, which reads this call's rows from keys_values and
keys_pe (docs/design/mla_page.md)."""
from .ragged_page_attention_v3 import _slots, _write, _xp


def _align128(n):
    return -(-n // 128) * 128


def _check_shapes(fw, qn, qp, kv, kpe, cache):
    if qn.ndim != 3 or qp.ndim != 3 or tuple(qp.shape[:2]) != tuple(qn.shape[:2]):
        raise ValueError(f"queries_nope, queries_pe: expected [T, Hq, R] and [T, Hq, E], got shapes {tuple(qn.shape)} "
                         f"and {tuple(qp.shape)}")
    t, _, r = qn.shape
    e = qp.shape[2]
    if tuple(kv.shape) != (t, r) or tuple(kpe.shape) != (t, e):
        raise ValueError(f"keys_values, keys_pe: expected [{t}, {r}] and [{t}, {e}], got shapes {tuple(kv.shape)} and "
                         f"{tuple(kpe.shape)}")
    pack = {"float32": 1, "bfloat16": 2, "float16": 2}.get(fw.dtype_name(cache))
    if cache.ndim != 4 or pack is None or tuple(cache.shape[2:]) != (pack, _align128(r) + _align128(e)):
        raise ValueError(f"kv_cache: expected [P, page_size / pack, {pack}, {_align128(r) + _align128(e)}] (pack, "
                         f"align128(R) + align128(E)) in float32, bfloat16 or float16, got {fw.dtype_name(cache)} "
                         f"{tuple(cache.shape)}")


def _rows(fw, xp, kv, kpe, cache):
    """[T, KD]: each token's cache row, [c, 0, k_pe, 0], in the cache's dtype."""
    c = fw.pad_last(kv, _align128(kv.shape[-1]))
    pe = fw.pad_last(kpe, _align128(kpe.shape[-1]))
    rows = xp.cat([c, pe], -1) if fw.name == "torch" else xp.concatenate([c, pe], -1)
    return fw.cast_float(rows, fw.dtype_name(cache))


def multi_latent_ragged_page_attention(fw, queries_nope, queries_pe, keys_values, keys_pe, kv_cache, kv_lens,
                                       block_tables, query_start_loc, distribution, /, *, softmax_scale=None,
                                       sliding_window=None, logits_soft_cap=None, mask_value=None, q_scale=None,
                                       k_scale=None, v_scale=None, platform=None, cfg=None):
    """Writes this call's latent rows into the paged cache, then runs latent attention over it,
    as ``ejkernel.modules.multi_latent_ragged_page_attention``{on}.

    Sequence s < distribution[2] owns tokens [query_start_loc[s], query_start_loc[s + 1]) and
    its first kv_lens[s] positions, this call's tokens the last of them: token i of n goes to
    position kv_lens[s] - n + i, at page block_tables[s * pages_per_seq + pos // page_size],
    slot pos % page_size, as [keys_values, 0, keys_pe, 0]; it sees the positions up to its own
    (causal), the sliding_window W newest when given. Every query head reads the same latent
    rows: logits softmax_scale * q_scale * k_scale * (q_nope . c + q_pe . k_pe), soft-capped;
    out = v_scale * softmax . c. Float32 accumulation. Tokens of no processed sequence get 0.

    Args:
      queries_nope: [T, Hq, R]; queries_pe: [T, Hq, E]; keys_values: [T, R]; keys_pe: [T, E]
        (float32, bfloat16 or float16, one dtype).
      kv_cache: [P, page_size / pack, pack, align128(R) + align128(E)] in their dtype (pack 1 for
        float32, 2 for 16-bit types).
      kv_lens: int32 [max_num_seqs], this call's tokens included; block_tables: int32
        [max_num_seqs * pages_per_seq] (flattened); query_start_loc: int32 [max_num_seqs + 1];
        distribution: int32 [3], its last the number of sequences processed (the seed's XLA path
        reads only that one).
      softmax_scale: default 1 / sqrt(R + E), as the seed's.
      logits_soft_cap: the cap (its sign does not change cap * tanh(x / cap)); sliding_window: W.
      mask_value: accepted and unused: masked positions are left out exactly (the seed adds it
        and zeroes their weights, so there it only shifts the running max).
      q_scale, k_scale: multiply the logits; v_scale: multiplies the output.
      platform ("auto" or None), cfg: None only.

    Returns:
      (out [T, Hq, R] in queries' dtype, the updated kv_cache); torch updates kv_cache in place
      and returns it.{no_gradient}
    """
    fw.refuse("multi_latent_ragged_page_attention", platform=platform not in (None, "auto"))
    xp = _xp(fw)
    qn, qp = fw.array("queries_nope", queries_nope), fw.array("queries_pe", queries_pe)
    kv, kpe = fw.array("keys_values", keys_values), fw.array("keys_pe", keys_pe)
    cache = fw.array("kv_cache", kv_cache)
    kv_lens, bt = fw.array("kv_lens", kv_lens), fw.array("block_tables", block_tables)
    qsl, dist = fw.array("query_start_loc", query_start_loc), fw.array("distribution", distribution)
    _check_shapes(fw, qn, qp, kv, kpe, cache)
    if mask_value is not None:
        fw.scalar("mask_value", mask_value, "f32")
    if kv_lens.ndim != 1 or bt.ndim != 1 or tuple(dist.shape) != (3,):
        raise ValueError(f"kv_lens, block_tables, distribution: expected [S], [S * pages_per_seq] and [3], got shapes "
                         f"{tuple(kv_lens.shape)}, {tuple(bt.shape)} and {tuple(dist.shape)}")
    num_pages, page_size, kd = cache.shape[0], cache.shape[1] * cache.shape[2], cache.shape[3]
    page, slot, valid = _slots(fw, xp, kv_lens, bt, qsl, dist[2], qn.shape[0], page_size, num_pages)
    # torch: a view of the same memory, so the write lands in kv_cache itself.
    flat = cache.view(num_pages, page_size, kd) if fw.name == "torch" else cache.reshape(num_pages, page_size, kd)
    written = _write(fw, xp, flat, page, slot, valid, _rows(fw, xp, kv, kpe, cache))
    cache = cache if fw.name == "torch" else written.reshape(cache.shape)
    out = fw.call("multi_latent_ragged_page_attention", cfg=cfg, queries_nope=qn, queries_pe=qp, keys_values=kv,
                  keys_pe=kpe, kv_cache=cache, kv_lens=kv_lens, block_tables=bt, query_start_loc=qsl,
                  distribution=dist, softmax_scale=softmax_scale, sliding_window=sliding_window,
                  logits_soft_cap=None if logits_soft_cap is None else abs(float(logits_soft_cap)), q_scale=q_scale,
                  k_scale=k_scale, v_scale=v_scale)["out"]
    return out, cache


def multi_latent_ragged_page_attention_v2(fw, queries_nope, queries_pe, keys_values, keys_pe, kv_cache, kv_lens,
                                          block_tables, query_start_loc, distribution, /, *, softmax_scale=None,
                                          sliding_window=None, logits_soft_cap=None, mask_value=None, q_scale=None,
                                          k_scale=None, v_scale=None, platform=None, cfg=None):
    """multi_latent_ragged_page_attention, as ``ejkernel.modules.multi_latent_ragged_page_attention_v2``{on}:
    the same arguments and results. The seed's v2 differs only in its TPU tiling knobs (per
    decode, prefill and mixed case), which its XLA path collapses to v1's, and which ejk has no
    use for (cfg: None only).{no_gradient}"""
    return multi_latent_ragged_page_attention(
        fw, queries_nope, queries_pe, keys_values, keys_pe, kv_cache, kv_lens, block_tables, query_start_loc,
        distribution, softmax_scale=softmax_scale, sliding_window=sliding_window, logits_soft_cap=logits_soft_cap,
        mask_value=mask_value, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, platform=platform, cfg=cfg)


WRAPPERS = (multi_latent_ragged_page_attention, multi_latent_ragged_page_attention_v2)
DOCS = {"jax": {}, "torch": {"on": ", on torch tensors"}}
