"""merge_attention_states: two partial attention results merged by their log-sum-exp."""


def merge_attention_states(fw, out_a, lse_a, out_b, lse_b):
    """Merges two partial attention results by their log-sum-exp (split-KV, cascade, ring).

    Args:
      out_a, out_b: [..., T, H, D] (float32, bfloat16 or float16), any number of leading dims.
      lse_a, lse_b: float32 [..., H, T], natural log; -inf: that part saw no key.

    Returns:
      (out, lse): out [..., T, H, D] in out_a's dtype and lse [..., H, T]; where both LSEs are
      -inf, out is 0 and lse -inf.{no_gradient}
    """
    given = {name: fw.array(name, x) for name, x in
             (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b))}
    result = fw.call("merge_attention_states", **given)
    return result["out"], result["lse"]


WRAPPERS = (merge_attention_states,)


def _vmap(op, size, names, in_batched, operands):
    """The op takes any leading dims: the mapped axis becomes one more."""
    from .. import _batching
    return op(*(_batching.broadcast(x, b, size) for x, b in zip(operands, in_batched)))


VMAP = {"merge_attention_states": _vmap}
