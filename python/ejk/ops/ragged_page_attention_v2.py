"""ragged_page_attention_v2, with ``ejkernel.modules.ragged_page_attention_v2``'s signature (mixed
prefill and decode over a read-only paged KV cache, K and V interleaved)."""
import sys

# The seed's compute_dtype default (jnp.bfloat16) where JAX is loaded, without importing it for
# a PyTorch-only process; the value is unused either way.
_JNP = sys.modules.get("jax.numpy")
_COMPUTE_DTYPE = _JNP.bfloat16 if _JNP is not None else "bfloat16"


def _num_seqs(fw, num_seqs, like):
    """num_seqs as the spec's int32 [1] tensor: the seed takes a Python int or a 0-d / [1] array."""
    if isinstance(num_seqs, int) and not isinstance(num_seqs, bool):
        if fw.name == "torch":
            import torch
            return torch.tensor([num_seqs], dtype=torch.int32, device=like.device)
        import jax.numpy as jnp
        return jnp.asarray([num_seqs], jnp.int32)
    return fw.array("num_seqs", num_seqs).reshape(1)


def ragged_page_attention_v2(fw, queries, kv_pages, context_lens, block_tables, query_start_loc, num_seqs,
                             softmax_aux=None, /, *, softmax_scale=None, logits_soft_cap=None,
                             compute_dtype=_COMPUTE_DTYPE, optimized=False, sliding_window=None, mask_value=None,
                             vmem_limit_bytes=None, platform=None, cfg=None, mesh=None, in_specs=None,
                             out_specs=None):
    """Ragged paged attention over a read-only cache, as ``ejkernel.modules.ragged_page_attention_v2``.

    Sequence s < num_seqs owns query tokens [query_start_loc[s], query_start_loc[s + 1]) and its
    first context_lens[s] cache positions (this call's tokens included); position j is
    kv_pages[block_tables[s, j // page_size], j % page_size], K of kv head g at head row 2g and
    V at 2g + 1 (query head h reads kv head h // (Hq // Hkv)). Query i of n_q sits at position
    context_lens[s] - n_q + i and sees the positions up to its own (causal, bottom-right), the
    sliding_window W newest of them when given. Logits softmax_scale * q.k, then
    cap * tanh(x / cap) with a soft cap; softmax_aux adds a sink logit per head to the
    denominator. Accumulates in float32 (the seed's XLA path accumulates in compute_dtype,
    bfloat16 by default). Tokens of no processed sequence get 0.

    Args:
      queries: [T, Hq, D] (float32, bfloat16 or float16).
      kv_pages: [num_pages, page_size, 2 * Hkv, D], queries' dtype.
      context_lens: int32 [S]; block_tables: int32 [S, pages_per_seq]; query_start_loc: int32 [S + 1].
      num_seqs: how many leading sequences are processed (an int or an int32 0-d or [1] array).
      softmax_aux: sinks [Hq], any float dtype (cast to float32), or None.
      softmax_scale: multiplies q.k (default 1/sqrt(D)).
      logits_soft_cap: the soft cap (default none).
      compute_dtype: accepted and unused: scores, softmax and sums are float32.
      sliding_window: W (default: every position up to the query's).
      optimized, mask_value, vmem_limit_bytes: TPU
        knobs, accepted and unused (masked positions are left out exactly).
      platform ("auto" or None), cfg, mesh, in_specs, out_specs: None only.

    Returns:
      [T, Hq, D] in queries' dtype.{no_gradient}
    """
    fw.refuse("ragged_page_attention_v2", platform=platform not in (None, "auto"),
              mesh=mesh is not None, in_specs=in_specs is not None, out_specs=out_specs is not None)
    if mask_value is not None:
        fw.scalar("mask_value", mask_value, "f32")
    tensors = {name: fw.array(name, x) for name, x in
               (("queries", queries), ("kv_pages", kv_pages), ("context_lens", context_lens),
                ("block_tables", block_tables), ("query_start_loc", query_start_loc))}
    tensors["num_seqs"] = _num_seqs(fw, num_seqs, tensors["context_lens"])
    if softmax_aux is not None:
        tensors["softmax_aux"] = fw.cast_float(fw.array("softmax_aux", softmax_aux), "float32")
    result = fw.call("ragged_page_attention_v2", cfg=cfg, **tensors, softmax_scale=softmax_scale,
                     logits_soft_cap=logits_soft_cap, sliding_window=sliding_window)
    return result["out"]


WRAPPERS = (ragged_page_attention_v2,)
