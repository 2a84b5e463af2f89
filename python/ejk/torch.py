"""ejkernel's ops for PyTorch, as custom ops (``torch.ops.ejk.*``): eager, torch.compile, CPU and CUDA.

    import torch
    from ejk.torch import flash_attention
    out = torch.compile(flash_attention, fullgraph=True)(q, k, v, causal=True)

The functions take the arguments of ``ejkernel.modules`` (as ``ejk.jax`` does) on torch tensors in
the same layouts ([B, S, H, D]); what ejkernel (C++) does not implement raises NotImplementedError
naming the argument, and a bad call raises ValueError with libejk's message, which names the
argument (``q``, ``k``, ``v`` are query, key and value). Under torch.compile the check runs when
the call is traced (the ops' fake kernels ask libejk, without data).

The ops are C++ (``libejk_torch.so``, on the LibTorch stable ABI) and call libejk directly: on the
CPU their tasks run on torch's intra-op threads, on CUDA on torch's current stream of the
tensors' device, asynchronously. They can be captured into a CUDA graph once they have run on the
capturing stream (``torch.cuda.graph(g, stream=s)`` after a warm-up on ``s``): a stream's small
workspace is allocated on its first run and cannot grow inside a capture (a ValueError says so).
A variant outside the built-in set is compiled on its first run
(a compile over a second says so on stderr) and cached on disk. ``mean_pooling`` is
differentiable (twice); flash attention and the merge have no gradient yet.
"""
import ctypes
import os

import torch

from . import _docs, _lib

__all__ = ["flash_attention", "mean_pooling", "merge_attention_states"]


def _load():
    """Loads libejk_torch, whose ops register themselves with torch, and the compile notice."""
    path = _lib.library_dir() / "libejk_torch.so"
    if not path.exists():
        raise ImportError(f"ejk.torch: {path} is missing: this ejk was built without PyTorch (pip builds it when "
                          "torch >= 2.10 imports in the build environment: pip install --no-build-isolation .), "
                          "or EJK_LIBRARY_DIR names a build without -DEJK_BUILD_TORCH=ON")
    torch.ops.load_library(str(path))
    lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)  # the same handle: for the setup function
    lib.ejk_torch_set_compile_notice.argtypes = [ctypes.c_double]
    lib.ejk_torch_set_compile_notice(1.0)
    return lib


_lib.libejk()  # first: libejk_torch binds to this private copy
_torch_lib = _load()
_ops = torch.ops.ejk


# --- checks when traced ------------------------------------------------------------------------

_DEVICES = {"cpu": (_lib.BACKEND_CPU, _lib.DEVICE_CPU), "cuda": (_lib.BACKEND_CUDA, _lib.DEVICE_CUDA)}


def _check(op, tensors, scalars=()):
    """libejk's checks of a call on its tensors' shapes, dtypes and devices (fake tensors: no data).

    tensors: (name, tensor) pairs, None skipped; scalars: (name, kind, value). Skipped where a
    shape is symbolic (a dynamic-shape trace): the op checks the same when it runs.
    """
    given = [(name, t) for name, t in tensors if t is not None]
    where = _DEVICES.get(given[0][1].device.type)
    if where is None or not all(isinstance(d, int) for _, t in given for d in t.shape):
        return
    args = _lib.ArgList()
    for name, t in given:
        args.tensor(name, tuple(t.shape), str(t.dtype).removeprefix("torch."), device_kind=where[1])
    for name, kind, value in scalars:
        args.scalar(name, kind, value)
    _lib.variant_key(op, args, where[0])


def _tensor(name, x):
    if x is not None and not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def _refuse(op, **unsupported):
    """NotImplementedError naming the arguments ejkernel does not implement, if any is given."""
    names = [name for name, given in unsupported.items() if given]
    if names:
        raise NotImplementedError(f"{op}: {', '.join(names)} {'is' if len(names) == 1 else 'are'} not supported "
                                  "by ejkernel (C++)")


def _no_gradient(op):
    def backward(ctx, *grads):
        raise NotImplementedError(f"{op}: ejkernel (C++) has no backward op for it yet, so it has no gradient")
    return backward


# --- flash attention ---------------------------------------------------------------------------

_FLASH_TENSORS = ("q", "k", "v", "bias", "q_segment_ids", "kv_segment_ids", "cum_seqlens_q", "cum_seqlens_k",
                  "softmax_aux")


@torch.library.register_fake("ejk::flash_attention")
def _flash_fake(q, k, v, bias, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k, softmax_aux,
                softmax_scale, causal, sliding_window, logits_soft_cap, normalize_output, max_seqlen_q, max_seqlen_k):
    scalars = [("causal", _lib.ARG_BOOL, causal), ("normalize_output", _lib.ARG_BOOL, normalize_output)]
    for name, kind, value in (("softmax_scale", _lib.ARG_FLOAT, softmax_scale),
                              ("sliding_window", _lib.ARG_INT_PAIR, sliding_window),
                              ("logits_soft_cap", _lib.ARG_FLOAT, logits_soft_cap),
                              ("max_seqlen_q", _lib.ARG_INT, max_seqlen_q), ("max_seqlen_k", _lib.ARG_INT, max_seqlen_k)):
        if value is not None:
            scalars.append((name, kind, value))
    tensors = (q, k, v, bias, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k, softmax_aux)
    _check("flash_attention", zip(_FLASH_TENSORS, tensors), scalars)
    lse = (1, q.shape[-2], q.shape[-3]) if cum_seqlens_q is not None else (q.shape[0], q.shape[2], q.shape[1])
    return q.new_empty(q.shape), q.new_empty(lse, dtype=torch.float32)


torch.library.register_autograd("ejk::flash_attention", _no_gradient("flash_attention"),
                                setup_context=lambda ctx, inputs, output: None)


def _window(sliding_window):
    """None, or [left, right]; an int w means (w, w) as in ejkernel.modules."""
    if sliding_window is None:
        return None
    if isinstance(sliding_window, int):
        return [sliding_window, sliding_window]
    if isinstance(sliding_window, (tuple, list)) and len(sliding_window) == 2:
        return [int(sliding_window[0]), int(sliding_window[1])]
    raise ValueError(f"sliding_window: expected an int or a pair (left, right), got {sliding_window!r}")


def _is_default_precision(precision):
    return precision is None or str(getattr(precision, "name", precision)).upper() == "DEFAULT"


def _is_float32(dtype):
    if dtype is None or dtype is torch.float32 or dtype == "float32":
        return True
    return str(getattr(dtype, "name", getattr(dtype, "__name__", dtype))) == "float32"  # NumPy / JAX spellings


def flash_attention(query, key, value, attention_mask=None, bias=None, q_segment_ids=None, kv_segment_ids=None,
                    cum_seqlens_q=None, cum_seqlens_k=None, softmax_aux=None, /, *, softmax_scale=None,
                    dropout_prob=0.0, causal=False, dropout_seed=None, sliding_window=None, logits_soft_cap=None,
                    normalize_output=True, precision=None, logits_dtype=torch.float32, platform=None, cfg=None,
                    mesh=None, in_specs=None, out_specs=None, max_seqlen_q=None, max_seqlen_k=None,
                    return_lse=False):
    _refuse("flash_attention", attention_mask=attention_mask is not None, dropout_prob=dropout_prob != 0.0,
            precision=not _is_default_precision(precision), logits_dtype=not _is_float32(logits_dtype),
            platform=platform not in (None, "auto"), cfg=cfg is not None, mesh=mesh is not None,
            in_specs=in_specs is not None, out_specs=out_specs is not None)
    tensors = [_tensor(name, x) for name, x in zip(
        ("query", "key", "value", "bias", "q_segment_ids", "kv_segment_ids", "cum_seqlens_q", "cum_seqlens_k",
         "softmax_aux"),
        (query, key, value, bias, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k, softmax_aux))]
    out, lse = _ops.flash_attention.default(
        *tensors, None if softmax_scale is None else float(softmax_scale), bool(causal), _window(sliding_window),
        None if logits_soft_cap is None else float(logits_soft_cap), bool(normalize_output),
        None if max_seqlen_q is None else int(max_seqlen_q), None if max_seqlen_k is None else int(max_seqlen_k))
    return (out, lse) if return_lse else out


flash_attention.__doc__ = _docs.flash_attention(
    on=", on torch tensors", devices=", on one device (CPU or CUDA)",
    sharding="      platform (\"auto\" or None), cfg, mesh, in_specs, out_specs: None only.\n",
    returns=" No\n      gradient: a backward through it raises NotImplementedError.")


# --- mean pooling ------------------------------------------------------------------------------

@torch.library.register_fake("ejk::mean_pooling")
def _pool_fake(x, cu_seqlens):
    _check("mean_pooling", [("x", x), ("cu_seqlens", cu_seqlens)])
    rows = x.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return x.new_empty((rows, x.shape[-1]))


@torch.library.register_fake("ejk::mean_pooling_backward")
def _pool_backward_fake(g, cu_seqlens, tokens):
    shape = (g.shape[0], tokens, g.shape[1]) if cu_seqlens is None else (tokens, g.shape[1])
    dx = g.new_empty(shape)
    _check("mean_pooling_backward", [("g", g), ("cu_seqlens", cu_seqlens), ("dx", dx)])
    return dx


def _pool_setup(ctx, inputs, output):
    x, cu_seqlens = inputs
    ctx.tokens = x.shape[-2]
    ctx.save_for_backward(cu_seqlens)


def _pool_backward(ctx, g):
    """g / len at every token of its sequence."""
    (cu_seqlens,) = ctx.saved_tensors
    return _ops.mean_pooling_backward.default(g, cu_seqlens, ctx.tokens), None


def _pool_backward_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _pool_backward_backward(ctx, gdx):
    """The backward is linear in g, and its adjoint is the mean over each sequence again."""
    (cu_seqlens,) = ctx.saved_tensors
    return _ops.mean_pooling.default(gdx, cu_seqlens), None, None


torch.library.register_autograd("ejk::mean_pooling", _pool_backward, setup_context=_pool_setup)
torch.library.register_autograd("ejk::mean_pooling_backward", _pool_backward_backward,
                                setup_context=_pool_backward_setup)


def mean_pooling(x, cu_seqlens=None, /, *, chunk_size=32, platform=None, cfg=None):
    _refuse("mean_pooling", platform=platform not in (None, "auto"), cfg=cfg is not None)
    if not isinstance(chunk_size, int):
        raise ValueError(f"chunk_size: expected an int, got {chunk_size!r}")
    return _ops.mean_pooling.default(_tensor("x", x), _tensor("cu_seqlens", cu_seqlens))


mean_pooling.__doc__ = _docs.mean_pooling(
    "\n      Its gradient is the output's gradient divided by the length at every token.")


# --- merge attention states --------------------------------------------------------------------

@torch.library.register_fake("ejk::merge_attention_states")
def _merge_fake(out_a, lse_a, out_b, lse_b):
    _check("merge_attention_states", [("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)])
    return out_a.new_empty(out_a.shape), lse_a.new_empty(lse_a.shape, dtype=torch.float32)


torch.library.register_autograd("ejk::merge_attention_states", _no_gradient("merge_attention_states"),
                                setup_context=lambda ctx, inputs, output: None)


def merge_attention_states(out_a, lse_a, out_b, lse_b):
    operands = [_tensor(name, x) for name, x in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b),
                                                  ("lse_b", lse_b))]
    return _ops.merge_attention_states.default(*operands)


merge_attention_states.__doc__ = _docs.merge_attention_states(" No gradient yet.")
