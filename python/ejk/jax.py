"""ejkernel's ops for JAX, as XLA FFI custom calls: usable under jax.jit, jax.vmap and
jax.grad (for ops with a backward), and under shard_map where the op's file allows it. Every op
of libejk that has a file in ``ejk/ops/`` is an attribute (``ejk.jax.__all__`` lists them):

    import jax, ejk.jax
    out = jax.jit(ejk.jax.<op>, static_argnames=...)(...)   # README: the ops and an example

The signatures are those of ``ejkernel.modules`` (the JAX library whose ops these are), so a
switch is a change of import; what ejkernel (C++) does not implement raises NotImplementedError
naming the argument. Every call is checked when traced: a bad one raises ValueError with libejk's
message, which names the argument (``q``, ``k``, ``v`` are query, key and value), and a scalar of
the wrong type a TypeError naming it.

Every op goes through one FFI handler (``ejk_call``): the op's name, its tensors' names and its
scalars are attributes, the tensors are the operands and results. On the CPU the kernels run on
XLA's intra-op thread pool; on CUDA on XLA's stream. A variant outside the built-in set is
compiled on its first run (a compile over a second says so on stderr) and cached on disk.
"""
import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

from . import _batching, _kit, _lib

_TARGET = "ejk_call"


def _register():
    """Registers the CPU and CUDA handler with XLA, and the compile notice."""
    lib = _lib.load("libejk_jax.so")
    for suffix, platform in (("cpu", "cpu"), ("cuda", "CUDA")):
        handler = getattr(lib, f"ejk_jax_call_{suffix}")
        jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(handler), platform=platform)
    lib.ejk_jax_set_compile_notice.argtypes = [ctypes.c_double]
    lib.ejk_jax_set_compile_notice(1.0)
    return lib


_lib.libejk()  # first: libejk_jax binds to this private copy
_jax_lib = _register()


def _where():
    """Backend and device kind the trace-time check assumes: those of JAX's default backend."""
    if jax.default_backend() == "cpu":
        return _lib.BACKEND_CPU, _lib.DEVICE_CPU
    return _lib.BACKEND_CUDA, _lib.DEVICE_CUDA


def _traced(value):
    return isinstance(value, jax.core.Tracer)


def _ffi(op, names, scalars, operands):
    """One FFI call, checked by libejk on the operands' shapes and dtypes first; its results are
    the outputs libejk says the call has."""
    backend, device = _where()
    args = _kit.arg_list([(n, x.shape, x.dtype) for n, x in zip(names, operands)], scalars, device)
    outputs = _lib.output_specs(op, args, backend)
    _lib.variant_key(op, args, backend)
    results = tuple(jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for _, shape, dtype in outputs)
    encoded = [_kit.encode(type_name, value) for _, type_name, value in scalars]
    ints = np.array([v for kind, i0, i1, _ in encoded for v in (kind, i0, i1)] or [0], np.int64)
    reals = np.array([real for *_, real in encoded] or [0.0], np.float64)
    tensor_names = ",".join(names + tuple(name for name, _, _ in outputs))
    return tuple(jax.ffi.ffi_call(_TARGET, results)(
        *operands, op=op, tensor_names=tensor_names, scalar_names=",".join(n for n, _, _ in scalars),
        scalar_ints=ints, scalar_reals=reals))


@functools.lru_cache(maxsize=None)
def _op(op, names, scalars):
    """op on operands `names` with static `scalars` ((name, type, value)): the FFI call under
    custom_vmap (the op's rule from ejk/ops/, else one example at a time), and under custom_vjp
    where ejk/ops/ gives the op a backward."""
    ffi = custom_vmap(lambda *operands: _ffi(op, names, scalars, operands))
    rule = _kit.vmap_rules().get(op)

    @ffi.def_vmap
    def batched(size, in_batched, *operands):
        if rule is None:
            outs = _batching.sequential(ffi, in_batched, operands)
        else:
            # A rule marked `takes_scalars` also sees the call's scalars (name -> value).
            extra = {"scalars": {n: v for n, _, v in scalars}} if getattr(rule, "takes_scalars", False) else {}
            outs = rule(ffi, size, names, in_batched, operands, **extra)
        outs = tuple(outs)
        return outs, (True,) * len(outs)

    backward = _kit.gradients().get(op)
    if backward is None:
        return ffi
    outputs = tuple(p.name for p in _kit.spec(op).outputs)
    values = {name: value for name, type_name, value in scalars if type_name != "tune"}  # cfg is the forward's

    # A backward marked `uses_outputs` also gets the forward's outputs (saved, not recomputed).
    uses_outputs = getattr(backward, "uses_outputs", False)

    def fwd(*operands):
        outs = ffi(*operands)
        return outs, (operands, outs if uses_outputs else None)

    def bwd(residuals, cotangents):
        operands, outs = residuals
        extra = {"outputs": dict(zip(outputs, outs))} if uses_outputs else {}
        grads = backward(_FW.call, lambda x: x.shape, dict(zip(names, operands)), values,
                         dict(zip(outputs, cotangents)), **extra)
        return tuple(grads.get(name) for name in names)

    differentiable = jax.custom_vjp(lambda *operands: ffi(*operands))
    differentiable.defvjp(fwd, bwd)
    return differentiable


class _Jax:
    """What the wrappers of ejk/ops/ call: the framework side of the kit."""
    module = __name__
    name = "jax"
    shards = True  # wrappers may take mesh, in_specs and out_specs (shard_map)
    refuse = staticmethod(_kit.refuse)

    @staticmethod
    def array(name, x):
        if x is None:
            return None
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise _kit.ArgumentTypeError(f"{name}: expected an array, got {type(x).__name__}")
        return jnp.asarray(x)

    @staticmethod
    def scalar(name, value, type_name):
        return _kit.scalar(name, value, type_name, _traced)

    @staticmethod
    def is_default_precision(precision):
        return precision is _kit.FRAMEWORK_DEFAULT or precision in (None, jax.lax.Precision.DEFAULT, "default", "DEFAULT")

    @staticmethod
    def is_float32(dtype):
        try:
            return dtype is None or dtype is _kit.FRAMEWORK_DEFAULT or np.dtype(dtype) == np.float32
        except TypeError:
            return False

    # The seed's defaults for the arguments whose default is a JAX object.
    defaults = {"precision": jax.lax.Precision.DEFAULT, "logits_dtype": jnp.float32,
                "preferred_element_type": jnp.float32}

    @staticmethod
    def check_precision(precision):
        """Any lax precision: the kernels' products are exact in the input dtype."""
        if precision is _kit.FRAMEWORK_DEFAULT or precision is None:
            return
        presets = getattr(jax.lax, "DotAlgorithmPreset", ())

        def known(p):
            if isinstance(p, jax.lax.Precision) or (presets and isinstance(p, presets)):
                return True
            if isinstance(p, str):
                return (p.lower() in {m.name.lower() for m in jax.lax.Precision} or
                        bool(presets) and p.upper() in presets.__members__)
            return False

        pair = isinstance(precision, (tuple, list)) and len(precision) == 2
        if not (all(map(known, precision)) if pair else known(precision)):
            raise ValueError(f"precision: expected a jax.lax.Precision (or its name), got {precision!r}")

    @staticmethod
    def is_float_dtype(dtype):
        if dtype is _kit.FRAMEWORK_DEFAULT:
            return True
        try:
            return jnp.issubdtype(jnp.dtype(dtype), jnp.floating)
        except TypeError:
            return False

    @staticmethod
    def on_platform(op, wanted, x):
        """platform "cpu"/"cuda": the call must run there (JAX's default backend)."""
        here = "cpu" if jax.default_backend() == "cpu" else "cuda"
        if wanted not in ("auto", here):
            raise ValueError(f"platform: {wanted!r} was asked for, but {op} runs on {here} here (JAX's default "
                             f"backend is {jax.default_backend()!r})")

    @staticmethod
    def dtype_name(x):
        return jnp.dtype(x.dtype).name

    @staticmethod
    def cast_float(x, dtype):
        """x as `dtype` where x is floating (the seed casts these); anything else as it is, for
        libejk to refuse by name."""
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != jnp.dtype(dtype) else x

    @staticmethod
    def head_dim_multiple(x):
        return 8 if jax.default_backend() == "cpu" else 16

    @staticmethod
    def pad_last(x, width):
        return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, width - x.shape[-1])])

    @staticmethod
    def adopt(x, like):
        """A MaskInfo's array (JAX, NumPy, or a CPU torch tensor) as a JAX array."""
        return jnp.asarray(x if isinstance(x, (jax.Array, np.ndarray)) else np.asarray(x))

    @staticmethod
    def zero_rows(out, q_ids):
        """out [B, Sq, H, D] with 0 where q_ids [B, Sq] < 0."""
        return jnp.where((q_ids >= 0)[:, :, None, None], out, jnp.zeros((), out.dtype))

    @classmethod
    def call(cls, op, cfg=None, **given):
        """op with its spec's arguments by name (None: not given), and cfg's tuning values (else
        an ejk.ops.overlay_cache's for op); {output name: array}."""
        s = _kit.spec(op)
        for name in given:
            s.param(name)  # TypeError for a name the op lacks
        names = tuple(p.name for p in s.inputs if given.get(p.name) is not None)
        operands = tuple(cls.array(name, given[name]) for name in names)
        scalars = tuple((p.name, p.type, cls.scalar(p.name, given[p.name], p.type)) for p in s.scalars
                        if given.get(p.name) is not None) + _kit.tune_entries(op, cfg)
        outs = _op(op, names, scalars)(*operands)
        return dict(zip((p.name for p in s.outputs), outs))


_FW = _Jax()

__all__ = _kit.bind_all(_FW, globals())
