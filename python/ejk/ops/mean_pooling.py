"""mean_pooling, as ``ejkernel.modules.mean_pooling``, differentiable (twice) through
mean_pooling_backward, whose adjoint is the mean again."""
from .. import _kit


def mean_pooling(fw, x, cu_seqlens=None, /, *, chunk_size=32, platform=None, cfg=None):
    """Mean over the token axis, as ``ejkernel.modules.mean_pooling``; differentiable.

    Args:
      x: [B, T, D] (float32, bfloat16 or float16); packed varlen: [total_tokens, D].
      cu_seqlens: int32 [N + 1], packed varlen: start of each sequence, from 0, ending at
        total_tokens.
      chunk_size: a tiling knob of ejkernel's Triton kernel; unused here, as in its XLA one.
      platform: None or "auto" (where x is), "cpu", "cuda"; the seed's "xla" is "auto", its
        "triton", "cute", "tilelang" are "cuda"; "pallas" is refused.
      cfg: None only (the op has no tuning axes: anything else is a ValueError).

    Returns:
      [B, D] (varlen [N, D]) in x's dtype, summed in float32; a sequence without tokens gives 0.
      Its gradient is the output's gradient divided by the length at every token.
    """
    fw.scalar("chunk_size", chunk_size, "i64")
    x = fw.array("x", x)
    fw.on_platform("mean_pooling", _kit.platform(platform), x)
    return fw.call("mean_pooling", cfg=cfg, x=x, cu_seqlens=fw.array("cu_seqlens", cu_seqlens))["out"]


WRAPPERS = (mean_pooling,)


def _backward(call, shape, inputs, scalars, grads):
    """g / len at every token: the backward op, with x's token count."""
    dx = call("mean_pooling_backward", g=grads["out"], cu_seqlens=inputs.get("cu_seqlens"),
              num_tokens=shape(inputs["x"])[-2])["dx"]
    return {"x": dx}


def _backward_backward(call, shape, inputs, scalars, grads):
    """The backward is linear in g; its adjoint is the mean over each sequence again."""
    return {"g": call("mean_pooling", x=grads["dx"], cu_seqlens=inputs.get("cu_seqlens"))["out"]}


GRADIENTS = {"mean_pooling": _backward, "mean_pooling_backward": _backward_backward}


def _vmap(op, size, names, in_batched, operands):
    """Dense: the mapped axis folds into B; varlen maps one example at a time."""
    from .. import _batching
    if "cu_seqlens" in names:
        return _batching.sequential(op, in_batched, operands)
    (x,), batch = operands, operands[0].shape[1]
    return tuple(_batching.unfold(y, size, batch) for y in op(_batching.fold(x, in_batched[0], size)))


VMAP = {"mean_pooling": _vmap, "mean_pooling_backward": _vmap}
