"""ejkernel's ops for PyTorch, as custom ops (``torch.ops.ejk.<op>``): eager, torch.compile, CPU and CUDA.

    import torch, ejk.torch
    out = torch.compile(ejk.torch.<op>, fullgraph=True)(...)   # README: the ops and an example

The functions take the arguments of ``ejkernel.modules`` (as ``ejk.jax`` does) on torch tensors in
the same layouts ([B, S, H, D]); what ejkernel (C++) does not implement raises NotImplementedError
naming the argument, a bad call raises ValueError with libejk's message, which names the
argument (``q``, ``k``, ``v`` are query, key and value), and a scalar of the wrong type a
TypeError naming it. Under torch.compile the check runs when the call is traced (the ops' fake
kernels ask libejk, without data).

Every op of libejk is a custom op whose schema comes from its spec (``libejk_torch.so``, on the
LibTorch stable ABI, calls libejk directly): on the CPU its tasks run on torch's intra-op
threads, on CUDA on torch's current stream of the tensors' device, asynchronously. They can be
captured into a CUDA graph once they have run on the capturing stream (``torch.cuda.graph(g,
stream=s)`` after a warm-up on ``s``): a stream's small workspace is allocated on its first run
and cannot grow inside a capture (a ValueError says so). A variant outside the built-in set is
compiled on its first run (a compile over a second says so on stderr) and cached on disk. An op
whose file in ``ejk/ops/`` gives a backward is differentiable; a backward through any other
raises NotImplementedError.
"""
import ctypes
import os

import numpy as np
import torch

from . import _kit, _lib


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
    lib.ejk_torch_last_invalid_argument.restype = ctypes.c_char_p
    return lib


_lib.libejk()  # first: libejk_torch binds to this private copy
_torch_lib = _load()
_ops = torch.ops.ejk

_DEVICES = {"cpu": (_lib.BACKEND_CPU, _lib.DEVICE_CPU), "cuda": (_lib.BACKEND_CUDA, _lib.DEVICE_CUDA)}
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _schema_args(op):
    """op's arguments in its torch schema's order: the input tensors, then the scalars (an op with
    tuning axes has one more, `tune`, after them: _tune_list)."""
    s = _kit.spec(op)
    return s.inputs + s.scalars


def _tune_list(axes, entries):
    """Tuning entries as the schema's `tune` argument: a value per tuning axis (`axes`, the op's),
    0 where none is given; None for none at all."""
    if not entries:
        return None
    given = {name: value for name, _, value in entries}
    return [given.get(name, 0) for name in axes]


def _tune_entries(op, values):
    """The schema's `tune` list as (axis, "tune", value) entries."""
    return [(p.name, "tune", v) for p, v in zip(_kit.spec(op).tuning, values or ()) if v != 0]


def _concrete(value):
    """A size or scalar as a Python value; a symbolic one is specialized, which guards the
    compiled graph on it."""
    return int(value) if isinstance(value, torch.SymInt) else value


def _hint(value):
    return value.node.hint if isinstance(value, torch.SymInt) else value


def _same(a, b):
    if isinstance(a, torch.SymInt) != isinstance(b, torch.SymInt):
        return False
    return a.node.expr == b.node.expr if isinstance(a, torch.SymInt) else a == b


def _symbolic_shape(shape, sizes):
    """An output shape libejk computed from the inputs' hints, in terms of the inputs' own
    (symbolic) sizes: each dim is the one input size of that value, or one less (an N from
    cu_seqlens' N + 1). None where that is not one size (two different symbols of the same
    value, or none): the caller then specializes."""
    out = []
    for value in shape:
        for offset in (0, 1):
            found = [s for s in sizes if _hint(s) == value + offset]
            if found:
                break
        if not found or any(not _same(found[0], s) for s in found[1:]):
            return None
        out.append(found[0] - offset)
    return tuple(out)


def _fake(op):
    """The fake kernel of op: libejk's checks and output shapes (ejk_output_specs), without data.
    Under dynamic shapes the outputs keep the inputs' symbolic sizes where libejk's shapes can
    be told apart from them (_symbolic_shape), else the sizes are specialized."""
    s = _kit.spec(op)
    params = _schema_args(op)

    def outputs_of(tensors, scalars, where, size):
        described = [(name, tuple(size(d) for d in t.shape), str(t.dtype).removeprefix("torch."))
                     for name, t in tensors]
        args = _kit.arg_list(described, [(n, t, _scalar_value(t, v, size)) for n, t, v in scalars], where[1])
        outputs = _lib.output_specs(op, args, where[0])
        _lib.variant_key(op, args, where[0])
        return outputs

    def fake(*args):
        given = {p.name: a for p, a in zip(params, args) if a is not None}
        tensors = [(p.name, given[p.name]) for p in s.inputs if p.name in given]
        scalars = [(p.name, p.type, given[p.name]) for p in s.scalars if p.name in given]
        scalars += _tune_entries(op, args[len(params)] if len(args) > len(params) else None)
        where = _DEVICES.get(tensors[0][1].device.type, _DEVICES["cpu"])
        sizes = [d for _, t in tensors for d in t.shape] + [v for _, t, v in scalars if t == "i64"]
        shapes = None
        if any(isinstance(d, torch.SymInt) for d in sizes):
            outputs = outputs_of(tensors, scalars, where, _hint)
            shapes = [_symbolic_shape(shape, sizes) for _, shape, _ in outputs]
        if shapes is None or None in shapes:
            outputs = outputs_of(tensors, scalars, where, _concrete)
            shapes = [shape for _, shape, _ in outputs]
        first = tensors[0][1]
        results = [first.new_empty(shape, dtype=getattr(torch, dtype)) for shape, (_, _, dtype) in zip(shapes, outputs)]
        return results[0] if len(results) == 1 else tuple(results)

    return fake


def _scalar_value(type_name, value, size=_concrete):
    """A scalar from the op's schema as _kit.encode takes it; `size` reads a symbolic int."""
    if type_name == "i64[2]":
        return tuple(size(v) for v in value)
    value = size(value)
    return float(value) if type_name in ("f32", "f64") else value


def _autograd(op, backward):
    """backward(ctx, *grads) and setup_context for op: backward from ejk/ops/, or an error."""
    s = _kit.spec(op)
    params = _schema_args(op)
    outputs = tuple(p.name for p in s.outputs)
    names = tuple(p.name for p in s.inputs)

    # A backward marked `uses_outputs` also gets the forward's outputs (saved, not recomputed).
    uses_outputs = getattr(backward, "uses_outputs", False)
    tuned = 1 if s.tuning else 0  # the schema's `tune` argument

    def setup_context(ctx, inputs, output):
        if backward is None:
            return
        outs = tuple(output) if isinstance(output, (tuple, list)) else (output,)
        ctx.save_for_backward(*inputs[:len(names)], *(outs if uses_outputs else ()))
        ctx.ejk_scalars = {p.name: a for p, a in zip(params[len(names):], inputs[len(names):]) if a is not None}

    def run_backward(ctx, *grads):
        if backward is None:
            raise NotImplementedError(f"{op}: ejkernel (C++) has no backward op for it yet, so it has no gradient")
        saved = dict(zip(names, ctx.saved_tensors[:len(names)]))
        extra = {"outputs": dict(zip(outputs, ctx.saved_tensors[len(names):]))} if uses_outputs else {}
        result = backward(_FW.call, lambda x: x.shape, {n: t for n, t in saved.items() if t is not None},
                          ctx.ejk_scalars, dict(zip(outputs, grads)), **extra)
        # The forward's tuning values (`tune`) are not the backward's, and have no gradient.
        return tuple(result.get(p.name) if p.name in names else None for p in params) + (None,) * tuned

    return run_backward, setup_context


def _register():
    """Fake kernels and autograd for every op libejk has (its schema came from the spec)."""
    gradients = _kit.gradients()
    for op in _kit.op_names():
        torch.library.register_fake(f"ejk::{op}")(_fake(op))
        backward, setup_context = _autograd(op, gradients.get(op))
        torch.library.register_autograd(f"ejk::{op}", backward, setup_context=setup_context)


class _Torch:
    """What the wrappers of ejk/ops/ call: the framework side of the kit."""
    module = __name__
    name = "torch"
    shards = False  # mesh, in_specs and out_specs are refused
    refuse = staticmethod(_kit.refuse)

    @staticmethod
    def array(name, x):
        if x is not None and not isinstance(x, torch.Tensor):
            raise _kit.ArgumentTypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        return x

    @staticmethod
    def scalar(name, value, type_name):
        if isinstance(value, _SYMBOLIC):  # a traced size (autograd under dynamic shapes): torch checks it
            return value
        return _kit.scalar(name, value, type_name)

    # The seed's JAX defaults, in torch's terms (torch has no Precision: None is the default).
    defaults = {"precision": None, "logits_dtype": torch.float32, "preferred_element_type": torch.float32}

    @staticmethod
    def is_default_precision(precision):
        return (precision is _kit.FRAMEWORK_DEFAULT or precision is None
                or str(getattr(precision, "name", precision)).upper() == "DEFAULT")

    @staticmethod
    def is_float32(dtype):
        if dtype is None or dtype is _kit.FRAMEWORK_DEFAULT or dtype is torch.float32 or dtype == "float32":
            return True
        return str(getattr(dtype, "name", getattr(dtype, "__name__", dtype))) == "float32"  # NumPy / JAX spellings

    @staticmethod
    def check_precision(precision):
        """Any precision (the kernels' products are exact in the input dtype): None, a name or a
        JAX Precision."""

    @staticmethod
    def is_float_dtype(dtype):
        if dtype is _kit.FRAMEWORK_DEFAULT or isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            return True
        name = str(getattr(dtype, "name", getattr(dtype, "__name__", dtype)))  # NumPy / JAX spellings
        return name in ("float16", "bfloat16", "float32", "float64")

    @staticmethod
    def on_platform(op, wanted, x):
        """platform "cpu"/"cuda": the tensors must be there."""
        if wanted not in ("auto", x.device.type):
            raise ValueError(f"platform: {wanted!r} was asked for, but query is on {x.device}")

    @staticmethod
    def dtype_name(x):
        return str(x.dtype).removeprefix("torch.")

    @staticmethod
    def cast_float(x, dtype):
        """x as `dtype` where x is floating (the seed casts these); anything else as it is, for
        libejk to refuse by name."""
        return x.to(getattr(torch, dtype)) if x.is_floating_point() and str(x.dtype) != f"torch.{dtype}" else x

    @staticmethod
    def head_dim_multiple(x):
        return 16 if x.device.type == "cuda" else 8

    @staticmethod
    def pad_last(x, width):
        return torch.nn.functional.pad(x, (0, width - x.shape[-1]))

    @staticmethod
    def adopt(x, like):
        """A MaskInfo's array (a tensor, or a JAX or NumPy array) as a tensor on like's device."""
        return (x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))).to(like.device)

    @staticmethod
    def zero_rows(out, q_ids):
        """out [B, Sq, H, D] with 0 where q_ids [B, Sq] < 0."""
        return torch.where((q_ids >= 0)[:, :, None, None], out, torch.zeros((), dtype=out.dtype, device=out.device))

    @classmethod
    def call(cls, op, cfg=None, **given):
        """op with its spec's arguments by name (None: not given), and cfg's tuning values (else an
        ejk.ops.overlay_cache's for op); {output name: tensor}.
        Reads only the tables made at import: torch.compile traces this function, and eager
        calls pay for every step."""
        inputs, scalars, outputs, known, axes = _TABLES[op]
        # An op without tuning axes refuses a cfg (ValueError naming it).
        tune = _tune_list(axes, _kit.tune_entries(op, cfg, axes))
        if not known.issuperset(given):
            for name in given:
                _SPECS[op].param(name)  # TypeError for a name the op lacks
        args = [given.get(name) for name in inputs]
        for a, name in zip(args, inputs):
            if a is not None and not isinstance(a, torch.Tensor):
                cls.array(name, a)
        for name, type_name in scalars:
            value = given.get(name)
            if value is not None:
                value = cls.scalar(name, value, type_name)
                if type_name == "i64[2]" and isinstance(value, tuple):
                    value = list(value)
            args.append(value)
        if axes:
            args.append(tune)
        try:
            outs = getattr(_ops, op).default(*args)
        except RuntimeError:
            if torch.compiler.is_compiling():  # traced: the fake kernel raised, naming the argument
                raise
            invalid = _torch_lib.ejk_torch_last_invalid_argument()
            if invalid:  # torch raises a kernel's every exception as RuntimeError
                raise ValueError(invalid.decode()) from None
            raise
        if len(outputs) == 1:
            return {outputs[0]: outs}
        return dict(zip(outputs, outs))


_SPECS = {op: _kit.spec(op) for op in _kit.op_names()}
# op -> (input names, (scalar name, type) pairs, output names, every argument name, tuning axes)
_TABLES = {op: (tuple(p.name for p in s.inputs), tuple((p.name, p.type) for p in s.scalars),
                tuple(p.name for p in s.outputs), frozenset(p.name for p in s.inputs + s.scalars),
                tuple(p.name for p in s.tuning))
           for op, s in _SPECS.items()}
_FW = _Torch()
_register()

# Every wrapper's docstring may say where its op has no gradient.
__all__ = _kit.bind_all(_FW, globals(),
                        {"no_gradient": " No gradient: a backward through it raises NotImplementedError."})
