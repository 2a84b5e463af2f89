"""ejkernel's ops for JAX, as XLA FFI custom calls: usable under jax.jit and jax.vmap.

    import jax
    from ejk.jax import flash_attention
    out = jax.jit(flash_attention, static_argnames="causal")(q, k, v, causal=True)

The signatures are those of ``ejkernel.modules`` (the JAX library whose ops these are), so a
switch is a change of import; what ejkernel (C++) does not implement raises NotImplementedError
naming the argument. Every call is checked when traced: a bad one raises ValueError with libejk's
message, which names the argument (``q``, ``k``, ``v`` are query, key and value).

On the CPU the kernels run on XLA's intra-op thread pool; on CUDA on XLA's stream. A variant
outside the built-in set is compiled on its first run (a compile over a second says so on
stderr) and cached on disk.
"""
import ctypes
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.sharding import PartitionSpec

from . import _batching, _docs, _lib, _sharding

__all__ = ["flash_attention", "mean_pooling", "merge_attention_states"]

_OPS = ("flash_attention", "mean_pooling", "mean_pooling_backward", "merge_attention_states")
_FLASH_OPTIONAL = ("bias", "q_segment_ids", "kv_segment_ids", "cum_seqlens_q", "cum_seqlens_k", "softmax_aux")
# in_specs' order in ejkernel.modules (its shard_map wrapper's operands), not the positional one.
_FLASH_SPEC_ORDER = ("query", "key", "value", "attention_mask", "bias", "softmax_aux", "cum_seqlens_q",
                     "cum_seqlens_k", "q_segment_ids", "kv_segment_ids")


def _register():
    """Registers every op's CPU and CUDA handler with XLA (ejk_<op>), and the compile notice."""
    lib = _lib.load("libejk_jax.so")
    for op in _OPS:
        for suffix, platform in (("cpu", "cpu"), ("cuda", "CUDA")):
            handler = getattr(lib, f"ejk_jax_{op}_{suffix}")
            jax.ffi.register_ffi_target(f"ejk_{op}", jax.ffi.pycapsule(handler), platform=platform)
    lib.ejk_jax_set_compile_notice.argtypes = [ctypes.c_double]
    lib.ejk_jax_set_compile_notice(1.0)
    return lib


_lib.libejk()  # first: libejk_jax binds to this private copy
_jax_lib = _register()


# --- argument checks ---------------------------------------------------------------------------

def _where():
    """Backend and device kind the trace-time check assumes: those of JAX's default backend."""
    if jax.default_backend() == "cpu":
        return _lib.BACKEND_CPU, _lib.DEVICE_CPU
    return _lib.BACKEND_CUDA, _lib.DEVICE_CUDA


def _check(op, tensors, scalars=()):
    """libejk's checks of a call (shapes, dtypes, scalars) on its abstract values.

    tensors: (name, array or ShapeDtypeStruct) pairs, None skipped; scalars: (name, kind, value).
    """
    backend, device = _where()
    args = _lib.ArgList()
    for name, x in tensors:
        if x is not None:
            args.tensor(name, x.shape, x.dtype, device_kind=device)
    for name, kind, value in scalars:
        args.scalar(name, kind, value)
    return _lib.variant_key(op, args, backend)


def _static(name, value, kind):
    """A scalar argument as the Python value it must be when traced (XLA attributes are static)."""
    try:
        return kind(value)
    except (TypeError, jax.errors.ConcretizationTypeError):
        raise ValueError(f"{name}: expected a Python {kind.__name__} known when tracing (it is fixed in the "
                         f"compiled call), got {value!r}") from None


def _array(name, x):
    if x is None:
        return None
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ValueError(f"{name}: expected an array, got {type(x).__name__}")
    return jnp.asarray(x)


def _refuse(op, **unsupported):
    """NotImplementedError naming the arguments ejkernel does not implement, if any is given."""
    names = [name for name, given in unsupported.items() if given]
    if names:
        raise NotImplementedError(f"{op}: {', '.join(names)} {'is' if len(names) == 1 else 'are'} not supported "
                                  "by ejkernel (C++)")


def _window(sliding_window):
    """None, or (left, right); an int w means (w, w) as in ejkernel.modules."""
    if sliding_window is None:
        return None
    if isinstance(sliding_window, (int, np.integer)):
        return int(sliding_window), int(sliding_window)
    if isinstance(sliding_window, (tuple, list)) and len(sliding_window) == 2:
        return _static("sliding_window[0]", sliding_window[0], int), _static("sliding_window[1]", sliding_window[1], int)
    raise ValueError(f"sliding_window: expected an int or a pair (left, right), got {sliding_window!r}")


# --- flash attention ---------------------------------------------------------------------------

class _FlashOptions(NamedTuple):
    optional: tuple          # names of the optional operands given, in operand order
    softmax_scale: float     # None: 1/sqrt(D)
    causal: bool
    window: tuple            # None or (left, right)
    logits_soft_cap: float   # None: off
    normalize_output: bool
    max_seqlen_q: int        # None: not given
    max_seqlen_k: int


def _flash_scalars(o):
    s = [("causal", _lib.ARG_BOOL, o.causal), ("normalize_output", _lib.ARG_BOOL, o.normalize_output)]
    if o.softmax_scale is not None:
        s.append(("softmax_scale", _lib.ARG_FLOAT, o.softmax_scale))
    if o.window is not None:
        s.append(("sliding_window", _lib.ARG_INT_PAIR, o.window))
    if o.logits_soft_cap is not None:
        s.append(("logits_soft_cap", _lib.ARG_FLOAT, o.logits_soft_cap))
    for name in ("max_seqlen_q", "max_seqlen_k"):
        if getattr(o, name) is not None:
            s.append((name, _lib.ARG_INT, getattr(o, name)))
    return s


def _flash_ffi(o, operands):
    """One FFI call: checks it, then out (q's shape and dtype) and lse [B, Hq, Sq] (varlen [1, Hq, Tq])."""
    q, k, v, *optional = operands
    _check("flash_attention", [("q", q), ("k", k), ("v", v), *zip(o.optional, optional)], _flash_scalars(o))
    varlen = "cum_seqlens_q" in o.optional
    lse_shape = (1, q.shape[-2], q.shape[-3]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    call = jax.ffi.ffi_call("ejk_flash_attention",
                            (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(lse_shape, jnp.float32)))
    present = sum(1 << _FLASH_OPTIONAL.index(name) for name in o.optional)
    left, right = o.window or (0, 0)
    return call(q, k, v, *optional, present=np.int64(present), has_scale=np.int64(o.softmax_scale is not None),
                softmax_scale=np.float32(o.softmax_scale or 0.0), causal=np.int64(o.causal),
                has_window=np.int64(o.window is not None), window_left=np.int64(left),
                window_right=np.int64(right), logits_soft_cap=np.float32(o.logits_soft_cap or 0.0),
                normalize_output=np.int64(o.normalize_output),
                max_seqlen_q=np.int64(-1 if o.max_seqlen_q is None else o.max_seqlen_q),
                max_seqlen_k=np.int64(-1 if o.max_seqlen_k is None else o.max_seqlen_k))


def _flash_vmap(op, o, size, in_batched, operands):
    """Folds the mapped axis into B; packed varlen and per-example sinks map one at a time."""
    names = ("q", "k", "v") + o.optional
    batched = dict(zip(names, in_batched))
    if "cum_seqlens_q" in o.optional or batched.get("softmax_aux"):
        return _batching.sequential(op, in_batched, operands)
    q = operands[0]
    batch = q.shape[1] if batched["q"] else q.shape[0]
    folded = []
    for name, x, b in zip(names, operands, in_batched):
        if name == "softmax_aux":
            folded.append(x)
        elif name == "bias":
            folded.append(_batching.fold_broadcastable(x, b, size, batch))
        else:
            folded.append(_batching.fold(x, b, size))
    out, lse = op(*folded)
    return _batching.unfold(out, size, batch), _batching.unfold(lse, size, batch)


@functools.lru_cache(maxsize=None)
def _flash_op(o):
    @custom_vmap
    def op(*operands):
        return _flash_ffi(o, operands)

    @op.def_vmap
    def rule(size, in_batched, *operands):
        return _flash_vmap(op, o, size, in_batched, operands), (True, True)

    return op


def flash_attention(query, key, value, attention_mask=None, bias=None, q_segment_ids=None, kv_segment_ids=None,
                    cum_seqlens_q=None, cum_seqlens_k=None, softmax_aux=None, /, *, softmax_scale=None,
                    dropout_prob=0.0, causal=False, dropout_seed=None, sliding_window=None, logits_soft_cap=None,
                    normalize_output=True, precision=jax.lax.Precision.DEFAULT, logits_dtype=jnp.float32,
                    platform=None, cfg=None, mesh=None, in_specs=None, out_specs=None, max_seqlen_q=None,
                    max_seqlen_k=None, return_lse=False):
    _refuse("flash_attention", attention_mask=attention_mask is not None, dropout_prob=dropout_prob != 0.0,
            precision=precision not in (None, jax.lax.Precision.DEFAULT, "default", "DEFAULT"),
            logits_dtype=logits_dtype is not None and np.dtype(logits_dtype) != np.float32,
            platform=platform not in (None, "auto"), cfg=cfg is not None)
    given = dict(zip(_FLASH_OPTIONAL, (bias, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k,
                                        softmax_aux)))
    given = {name: _array(name, x) for name, x in given.items() if x is not None}
    o = _FlashOptions(
        optional=tuple(given),
        softmax_scale=None if softmax_scale is None else _static("softmax_scale", softmax_scale, float),
        causal=_static("causal", causal, bool),
        window=_window(sliding_window),
        logits_soft_cap=None if logits_soft_cap is None else _static("logits_soft_cap", logits_soft_cap, float),
        normalize_output=_static("normalize_output", normalize_output, bool),
        max_seqlen_q=None if max_seqlen_q is None else _static("max_seqlen_q", max_seqlen_q, int),
        max_seqlen_k=None if max_seqlen_k is None else _static("max_seqlen_k", max_seqlen_k, int))
    operands = (_array("query", query), _array("key", key), _array("value", value), *given.values())
    if _sharding.requested(mesh, in_specs, out_specs):
        return _flash_sharded(_flash_op(o), ("query", "key", "value") + o.optional, operands, mesh, in_specs,
                              out_specs, return_lse)
    out, lse = _flash_op(o)(*operands)
    return (out, lse) if return_lse else out


flash_attention.__doc__ = _docs.flash_attention(sharding="""\
      platform ("auto" or None), cfg: None only.
      mesh, in_specs, out_specs: given all three, the call runs under jax.shard_map over mesh, each
        device running the kernel on its local shard; given fewer, unsharded (as in
        ejkernel.modules). in_specs: a PartitionSpec for each of query, key, value,
        attention_mask, bias, softmax_aux, cum_seqlens_q, cum_seqlens_k, q_segment_ids,
        kv_segment_ids, in this order (ejkernel.modules' order, not the positional one); None
        means replicated, or not given. out_specs: query's spec (out has its shape); with
        return_lse, lse's follows ([B, Hq, Sq] as [B, Sq, Hq, D]), or pass the pair. Sharding
        batch or heads is exact (shard k, v, bias, segment ids and [Hq, S] sinks alike).
        Sharding a sequence axis is not, and nothing guards against it (nor in
        ejkernel.modules): a query sees only its shard's keys, and causal and sliding_window
        count positions within the shard. A mesh with explicit axes (jax.make_mesh's default)
        needs the operands sharded as in_specs say already, as shard_map does.
""")


def _flash_sharded(op, names, operands, mesh, in_specs, out_specs, return_lse):
    """op under shard_map; in_specs in _FLASH_SPEC_ORDER (None: replicated, or not given);
    out_specs: query's spec, or with return_lse also the pair (query's, lse's)."""
    _sharding.check_mesh(mesh)
    if (not isinstance(in_specs, (tuple, list)) or isinstance(in_specs, PartitionSpec)
            or len(in_specs) != len(_FLASH_SPEC_ORDER)):
        raise ValueError(f"in_specs: expected {len(_FLASH_SPEC_ORDER)} PartitionSpecs (None for an argument not "
                         f"given), one for each of {', '.join(_FLASH_SPEC_ORDER)}, in this order; got {in_specs!r}")
    by_name = dict(zip(_FLASH_SPEC_ORDER, in_specs))
    specs = [PartitionSpec() if by_name[name] is None else by_name[name] for name in names]
    for name, spec, x in zip(names, specs, operands):
        _sharding.check_spec(f"in_specs[{_FLASH_SPEC_ORDER.index(name)}] ({name})", spec, x.shape, mesh)

    q = operands[0]
    jax.eval_shape(op, *operands)  # libejk's checks, on the global shapes
    # out has query's shape and lse is [B, Hq, Sq]: any other spec would assemble the shards wrongly.
    q_axes = _sharding.normal(specs[0], q.ndim)
    lse_axes = (q_axes[0], q_axes[2], q_axes[1]) if q.ndim == 4 else (None, q_axes[1], q_axes[0])
    lse_spec = PartitionSpec(*lse_axes)
    pair = return_lse and isinstance(out_specs, (tuple, list)) and not isinstance(out_specs, PartitionSpec)
    if pair and len(out_specs) == 2:
        given = (("out_specs[0] (out)", out_specs[0], specs[0]), ("out_specs[1] (lse)", out_specs[1], lse_spec))
    elif isinstance(out_specs, PartitionSpec):
        given = (("out_specs", out_specs, specs[0]),)
    else:
        raise ValueError("out_specs: expected a PartitionSpec for the output" +
                         (", or a pair of them for (out, lse)" if return_lse else "") + f"; got {out_specs!r}")
    for where, spec, expected in given:
        if not isinstance(spec, PartitionSpec) or _sharding.normal(spec, 4) != _sharding.normal(expected, 4):
            raise ValueError(f"{where}: expected {expected}, as query's in_specs[0] shards it, got {spec!r}")
    if return_lse:
        return _sharding.run(op, mesh, specs, (specs[0], lse_spec), operands)
    return _sharding.run(lambda *x: op(*x)[0], mesh, specs, specs[0], operands)


# --- mean pooling ------------------------------------------------------------------------------

def _pool_vmap(op, size, in_batched, operands):
    """Dense: the mapped axis folds into B; varlen maps one example at a time."""
    if len(operands) > 1:
        return _batching.sequential(op, in_batched, operands)
    x = operands[0]
    batch = x.shape[1]
    return _batching.unfold(op(_batching.fold(x, in_batched[0], size)), size, batch)


@functools.lru_cache(maxsize=None)
def _pool_op(direction, tokens):
    """mean_pooling ("forward") or its backward on operands (x or g[, cu_seqlens]); tokens: T of
    the backward's dense dx."""

    def ffi(*operands):
        src, cu = operands[0], operands[1] if len(operands) > 1 else None
        if direction == "forward":
            rows = src.shape[0] if cu is None else cu.shape[0] - 1
            result = jax.ShapeDtypeStruct((rows, src.shape[-1]), src.dtype)
            _check("mean_pooling", [("x", src), ("cu_seqlens", cu)])
        else:
            shape = (src.shape[0], tokens, src.shape[1]) if cu is None else (tokens, src.shape[1])
            result = jax.ShapeDtypeStruct(shape, src.dtype)
            _check("mean_pooling_backward", [("g", src), ("cu_seqlens", cu), ("dx", result)])
        name = "ejk_mean_pooling" if direction == "forward" else "ejk_mean_pooling_backward"
        return jax.ffi.ffi_call(name, result)(*operands)

    op = custom_vmap(ffi)

    @op.def_vmap
    def rule(size, in_batched, *operands):
        return _pool_vmap(op, size, in_batched, operands), True

    return op


@functools.lru_cache(maxsize=None)
def _pool_differentiable(tokens, varlen):
    """mean_pooling with its gradient from the backward op (g / len at every token)."""
    forward_op, backward_op = _pool_op("forward", tokens), _pool_op("backward", tokens)
    if varlen:
        pool = jax.custom_vjp(lambda x, cu: forward_op(x, cu))
        pool.defvjp(lambda x, cu: (forward_op(x, cu), cu), lambda cu, g: (backward_op(g, cu), None))
    else:
        pool = jax.custom_vjp(lambda x: forward_op(x))
        pool.defvjp(lambda x: (forward_op(x), None), lambda _, g: (backward_op(g),))
    return pool


def mean_pooling(x, cu_seqlens=None, /, *, chunk_size=32, platform=None, cfg=None):
    _refuse("mean_pooling", platform=platform not in (None, "auto"), cfg=cfg is not None)
    _static("chunk_size", chunk_size, int)
    x = _array("x", x)
    tokens = x.shape[-2] if x.ndim >= 2 else 0
    if cu_seqlens is None:
        return _pool_differentiable(tokens, False)(x)
    return _pool_differentiable(tokens, True)(x, _array("cu_seqlens", cu_seqlens))


mean_pooling.__doc__ = _docs.mean_pooling()


# --- merge attention states --------------------------------------------------------------------

def _merge_ffi(out_a, lse_a, out_b, lse_b):
    _check("merge_attention_states", [("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b)])
    call = jax.ffi.ffi_call("ejk_merge_attention_states", (jax.ShapeDtypeStruct(out_a.shape, out_a.dtype),
                                                           jax.ShapeDtypeStruct(lse_a.shape, jnp.float32)))
    return call(out_a, lse_a, out_b, lse_b)


_merge_op = custom_vmap(_merge_ffi)


@_merge_op.def_vmap
def _merge_vmap(size, in_batched, *operands):
    """The op takes any leading dims: the mapped axis becomes one more."""
    return _merge_op(*(_batching.broadcast(x, b, size) for x, b in zip(operands, in_batched))), (True, True)


def merge_attention_states(out_a, lse_a, out_b, lse_b):
    operands = [_array(n, x) for n, x in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b))]
    return _merge_op(*operands)


merge_attention_states.__doc__ = _docs.merge_attention_states()
