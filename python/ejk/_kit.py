"""The framework-neutral half of the bindings: every op's arguments from its spec (through
libejk's C ABI), scalars checked against the spec's types, and the per-op wrappers of
``ejk/ops/`` bound to a framework (``ejk.jax``, ``ejk.torch``).

A per-op module ``ejk/ops/<name>.py`` holds what the spec cannot say: the seed's signature
(functions listed in ``WRAPPERS``, taking the framework first), and optionally ``GRADIENTS``
(op name -> backward in terms of other ops), ``VMAP`` (op name -> a batching rule for JAX) and
``DOCS`` (framework name -> the docstring's placeholders). Everything else (the FFI call, the
torch schema, fake kernels, checks, errors naming arguments) is the framework's, the same for
every op.
"""
import contextvars
import dataclasses
import functools
import importlib
import inspect
import math
import pkgutil
from typing import NamedTuple

import numpy as np

from . import _lib


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong Python type: a TypeError, and a ValueError as every other bad
    argument is, so callers catching either see it."""


class Param(NamedTuple):
    name: str
    role: int          # _lib.ROLE_INPUT, ROLE_OUTPUT or ROLE_SCALAR
    optional: bool     # tensors: may be left out; scalars: absent by default
    contiguous: bool   # tensors: the whole tensor must be contiguous (else its last dim only)
    type: str          # tensors: "bf16|f16|f32"; scalars: f32, f64, i64, bool, i64[2]
    layout: str
    default: str
    doc: str


class Spec(NamedTuple):
    name: str
    doc: str
    inputs: tuple      # Params, in the spec's order
    outputs: tuple
    scalars: tuple
    tuning: tuple = ()  # the tuning axes cfg= may set (block sizes): Params of type i64

    def param(self, name):
        for p in self.inputs + self.scalars:
            if p.name == name:
                return p
        raise TypeError(f"{self.name}: no argument {name!r} (its arguments: "
                        f"{', '.join(p.name for p in self.inputs + self.scalars)})")


@functools.lru_cache(maxsize=None)
def spec(op):
    """op's arguments as its spec declares them."""
    doc, params = _lib.describe_op(op)
    ps = [Param(*p) for p in params]
    def having(role):
        return tuple(p for p in ps if p.role == role)
    return Spec(op, doc, having(_lib.ROLE_INPUT), having(_lib.ROLE_OUTPUT), having(_lib.ROLE_SCALAR),
                having(_lib.ROLE_TUNING))


def op_names():
    return _lib.op_names()


# --- scalars -----------------------------------------------------------------------------------

_INT64 = (-(1 << 63), (1 << 63) - 1)
_F32_MAX = float(np.finfo(np.float32).max)
_KIND_WORDS = {"bool": "bool", "i64": "int", "f32": "float", "f64": "float", "i64[2]": "int or pair of ints"}
KINDS = {"bool": _lib.ARG_BOOL, "i64": _lib.ARG_INT, "f32": _lib.ARG_FLOAT, "f64": _lib.ARG_FLOAT,
         "i64[2]": _lib.ARG_INT_PAIR, "tune": _lib.ARG_TUNE}


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _int(name, value):
    if not _is_int(value):
        raise ArgumentTypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"{name}: {value} does not fit in int64")
    return value


def _float(name, value, type_name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"{name}: expected a float, got {type(value).__name__} {value!r}")
    try:
        value = float(value)
    except OverflowError:
        raise ValueError(f"{name}: {value} is too large for a float") from None
    if type_name == "f32" and math.isfinite(value) and abs(value) > _F32_MAX:
        raise ValueError(f"{name}: {value} is not finite as a float32 (its largest is {_F32_MAX:.6g})")
    return value


def scalar(name, value, type_name, traced=lambda value: False):
    """value as the Python value of a scalar of spec type `type_name`: checked, never coerced
    (causal="false" is an error, not True). `traced(value)` says whether it is a framework's
    traced value, which cannot become a static argument."""
    if traced(value):
        raise ValueError(f"{name}: expected a Python {_KIND_WORDS.get(type_name, type_name)} known when tracing "
                         f"(it is fixed in the compiled call), got {value!r}")
    if type_name == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise ArgumentTypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")
        return bool(value)
    if type_name == "i64":
        return _int(name, value)
    if type_name in ("f32", "f64"):
        return _float(name, value, type_name)
    if type_name == "i64[2]":
        if _is_int(value):  # w means (w, w), as ejkernel.modules takes a window
            w = _int(name, value)
            return (w, w)
        if isinstance(value, (tuple, list)) and len(value) == 2:
            return tuple(_int(f"{name}[{i}]", _untraced(f"{name}[{i}]", v, traced)) for i, v in enumerate(value))
        raise ArgumentTypeError(f"{name}: expected an int or a pair (left, right) of ints, got "
                                f"{type(value).__name__} {value!r}")
    raise TypeError(f"{name}: scalar type {type_name!r} is not one the bindings know")


class NoTuningAxes(ValueError, NotImplementedError):
    """cfg= given to an op with no tuning axes: a ValueError (nothing cfg could name), and the
    NotImplementedError every argument ejkernel (C++) cannot use raises."""


# The seed's FwdParams fields (its vocabulary for every op) that name one of our tuning axes.
_SEED_PARAMS = {"q_blocksize": "block_q", "kv_blocksize": "block_k"}


def _seed_config(cfg):
    """A seed config object (``FlashAttentionConfig(fwd_params=FwdParams(q_blocksize=...))``, a
    dataclass with fwd_params and bwd_params) as a mapping of our axes: its forward's block
    sizes. Fields without a counterpart are refused by name."""
    platform(getattr(cfg, "platform", None))  # refused as platform= would be; the call's platform= decides
    bwd = getattr(cfg, "bwd_params", None)
    if bwd is not None and any(v is not None for v in _fields(bwd).values()):
        raise NotImplementedError("cfg.bwd_params: a gradient never takes the forward call's cfg; give the backward "
                                  "op's values as an ejk.ops.overlay_cache entry for it")
    out = {}
    for name, value in _fields(getattr(cfg, "fwd_params", None) or {}).items():
        if value is None:
            continue
        if name not in _SEED_PARAMS:
            raise NotImplementedError(f"cfg.fwd_params.{name}: no tuning axis of ejkernel (C++) corresponds to it "
                                      f"(it takes {', '.join(_SEED_PARAMS)})")
        out[_SEED_PARAMS[name]] = value
    return out


def _fields(params):
    if isinstance(params, dict):
        return params
    if dataclasses.is_dataclass(params):
        return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    raise ArgumentTypeError(f"cfg: fwd_params/bwd_params: expected the seed's FwdParams or a dict, got "
                            f"{type(params).__name__}")


def config(cfg):
    """cfg= as (axis, "tune", value) entries: a mapping (or NamedTuple) of the op's tuning axes
    (block_q, block_k, ...) to ints, or the seed's config object (its fwd_params' block sizes).
    None values are left to the tuning store and the heuristic."""
    if cfg is None:
        return ()
    if hasattr(cfg, "fwd_params") or hasattr(cfg, "bwd_params"):
        cfg = _seed_config(cfg)
    items = cfg._asdict().items() if hasattr(cfg, "_asdict") else getattr(cfg, "items", lambda: None)()
    if items is None:
        raise ArgumentTypeError(f"cfg: expected a mapping of tuning axes to ints (e.g. {{'block_q': 64}}), "
                                f"got {type(cfg).__name__}")
    out = []
    for name, value in sorted(items, key=lambda item: str(item[0])):
        if not isinstance(name, str):
            raise ArgumentTypeError(f"cfg: axis names are strings, got {name!r}")
        if value is not None:
            value = _int(f"cfg[{name!r}]", value)
            if value <= 0:
                raise ValueError(f"cfg[{name!r}]: expected a positive int, got {value}")
            out.append((name, "tune", value))
    return tuple(out)


# ejk.ops.overlay_cache's mappings ({op name: cfg}), innermost last. A ContextVar: each thread
# and task sees its own, and torch.compile guards a compiled graph on it.
OVERLAYS = contextvars.ContextVar("ejk_cfg_overlays", default=())


def tune_entries(op, cfg, axes=None):
    """The tuning entries of a call of libejk's op `op`: cfg= where given, else the innermost
    overlay's value for op, else none (libejk then takes the tuning store's, else the spec's
    heuristic). Axis names are checked here (against `axes`, op's tuning axes, default its
    spec's), values by libejk against the spec."""
    if cfg is None:
        cfg = next((m[op] for m in reversed(OVERLAYS.get()) if op in m), None)
        if cfg is None:
            return ()
    if axes is None:
        axes = tuple(p.name for p in spec(op).tuning)
    if not axes:
        raise NoTuningAxes(f"cfg: {op} has no tuning axes (its kernels take no block sizes or the like): "
                           "give None")
    entries = config(cfg)
    for name, _, _ in entries:
        if name not in axes:
            raise ValueError(f"cfg: {name!r} is not a tuning axis of {op} (its axes: {', '.join(axes)})")
    return entries


def _untraced(name, value, traced):
    if traced(value):
        raise ValueError(f"{name}: expected a Python int known when tracing (it is fixed in the compiled call), "
                         f"got {value!r}")
    return value


def encode(type_name, value):
    """A checked scalar as (ejk_arg_kind, ints[0], ints[1], real)."""
    kind = KINDS[type_name]
    if kind == _lib.ARG_FLOAT:
        return kind, 0, 0, value
    if kind == _lib.ARG_INT_PAIR:
        return kind, value[0], value[1], 0.0
    return kind, int(value), 0, 0.0


def arg_list(tensors, scalars, device_kind=_lib.DEVICE_CPU):
    """An _lib.ArgList of (name, shape, dtype) tensors and (name, type, value) checked scalars."""
    args = _lib.ArgList()
    for name, shape, dtype in tensors:
        args.tensor(name, tuple(shape), dtype, device_kind=device_kind)
    for name, type_name, value in scalars:
        kind, i0, i1, real = encode(type_name, value)
        args.scalar(name, kind, (i0, i1) if kind == _lib.ARG_INT_PAIR else (real if kind == _lib.ARG_FLOAT else i0))
    return args


class _FrameworkDefault:
    """A default that is the framework's own (a JAX ``Precision``, a dtype): ``bind`` shows the
    framework's value in the signature (fw.defaults), and a wrapper reads this as "not given"."""

    def __repr__(self):
        return "<the framework's default>"


FRAMEWORK_DEFAULT = _FrameworkDefault()

# platform= as ejkernel.modules spells it: ours, and the seed's backends mapped to where they run.
_PLATFORMS = {None: "auto", "auto": "auto", "cpu": "cpu", "cuda": "cuda", "xla": "auto", "triton": "cuda",
              "cute": "cuda", "tilelang": "cuda"}


def platform(value):
    """platform= as "auto", "cpu" or "cuda": the seed's "xla" runs ejkernel's kernels wherever the
    arrays are; its GPU backends ("triton", "cute", "tilelang", "cuda") are the CUDA kernels."""
    try:
        return _PLATFORMS[value]
    except (KeyError, TypeError):
        pass
    if value == "pallas":
        raise NotImplementedError("platform: 'pallas' (the seed's Pallas kernels) has no counterpart in ejkernel (C++); "
                                  "it has 'auto', 'cpu' and 'cuda' ('xla' means 'auto'; 'triton', 'cute', 'tilelang' "
                                  "mean 'cuda')")
    raise ValueError(f"platform: expected None, 'auto', 'cpu' or 'cuda' (or the seed's 'xla', 'triton', 'cute', "
                     f"'tilelang'), got {value!r}")


def refuse(op, **unsupported):
    """NotImplementedError naming the arguments ejkernel does not implement, if any is given."""
    names = [name for name, given in unsupported.items() if given]
    if names:
        raise NotImplementedError(f"{op}: {', '.join(names)} {'is' if len(names) == 1 else 'are'} not supported "
                                  "by ejkernel (C++)")


def lower_mask_info(mask_info):
    """mask_info= lowered to segment labels, a band and a dense term (ejk.types' Lowered); any
    MaskInfo of ejk.types (JAX) or ejk.types.torch is accepted, its arrays adopted by the op."""
    from .types.structure import MaskStructure
    if not isinstance(mask_info, MaskStructure):
        raise ArgumentTypeError(f"mask_info: expected an ejk.types.MaskInfo (or ejk.types.torch.MaskInfo), got "
                                f"{type(mask_info).__name__}")
    return mask_info.lower("mask_info")


# --- per-op modules ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def op_modules():
    """Every op module of ejk/ops/, imported (adding one there adds its wrappers everywhere);
    a private one (``_policy``) is not an op's."""
    from . import ops
    return tuple(importlib.import_module(f"{ops.__name__}.{m.name}")
                 for m in sorted(pkgutil.iter_modules(ops.__path__), key=lambda m: m.name) if not m.name.startswith("_"))


def _merged(attribute):
    table = {}
    for module in op_modules():
        table.update(getattr(module, attribute, {}))
    return table


@functools.lru_cache(maxsize=None)
def gradients():
    """op name -> backward(call, inputs, scalars, grads) -> {input name: gradient}."""
    return _merged("GRADIENTS")


@functools.lru_cache(maxsize=None)
def vmap_rules():
    """op name -> rule(op_fn, size, names, in_batched, operands) -> outputs (all mapped)."""
    return _merged("VMAP")


def spec_doc(op):
    """A docstring from the spec alone, for a wrapper that brings none."""
    s = spec(op)
    lines = [s.doc, "", "    Args:"]
    lines += [f"      {p.name}: {p.layout} ({p.type}){' optional' if p.optional else ''}. {p.doc}" for p in s.inputs]
    lines += [f"      {p.name}: {p.type}, default {p.default}. {p.doc}" for p in s.scalars]
    lines += ["", "    Returns:"] + [f"      {p.name}: {p.layout} ({p.type}). {p.doc}" for p in s.outputs]
    return "\n".join(lines)


class _Parts(dict):
    def __missing__(self, key):
        return ""


def bind(fn, fw, doc_parts=None):
    """The public function of wrapper `fn(fw, ...)`: fn's signature less `fw`, its docstring with
    the framework's parts filled in (doc_parts: {placeholder: text})."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(fw, *args, **kwargs)

    signature = inspect.signature(fn)
    defaults = getattr(fw, "defaults", {})
    params = [p.replace(default=defaults[p.name]) if p.default is FRAMEWORK_DEFAULT else p
              for p in list(signature.parameters.values())[1:]]
    wrapper.__signature__ = signature.replace(parameters=params)
    del wrapper.__wrapped__
    template = fn.__doc__ if fn.__doc__ else spec_doc(getattr(fn, "op", fn.__name__))
    wrapper.__doc__ = template.format_map(_Parts(doc_parts or {}))
    wrapper.__module__ = fw.module
    return wrapper


def bind_all(fw, namespace, doc_parts=None):
    """Binds every wrapper of ejk/ops/ into `namespace` (a module's globals); returns their names.
    A docstring's placeholders are filled from `doc_parts` (the framework's, for every op) and
    the module's DOCS[fw.name]."""
    names = []
    for module in op_modules():
        parts = {**(doc_parts or {}), **getattr(module, "DOCS", {}).get(fw.name, {})}
        for fn in getattr(module, "WRAPPERS", ()):
            namespace[fn.__name__] = bind(fn, fw, parts)
            names.append(fn.__name__)
    return sorted(names)
