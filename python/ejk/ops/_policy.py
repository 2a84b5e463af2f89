"""``ejkernel.ops``' config-selection names (0.0.80.3) on ejkernel (C++)'s engine, which chooses a
call's tuning values by: the caller's ``cfg=`` > an ``overlay_cache`` entry for the op > the
tuning store (``ejk tune``, or in-call autotuning) > the spec's heuristic (docs/design/tuning.md).

- ``AutotunePolicy``: ``cache_miss_fallback="autotune"`` (with ``allow_autotune``) turns in-call
  autotuning on for the process (libejk's ``ejk_set_autotune``), ``"heuristics"`` off;
  ``validate_backward`` autotunes the backward ops' classes too (their own first call), else
  the forward ops' only. ``EJKERNEL_AUTOTUNE_POLICY`` (``autotune``/``heuristics``) sets it at
  import, as in the seed; unset, libejk follows ``EJK_AUTOTUNE`` (default off).
- The policy is the process's: libejk makes a class's plan when a call runs (under ``jax.jit``
  at the first execution), so it applies to plans made while it is in force.
- ``overlay_cache({op: cfg})``: cfg for the calls of ``op`` traced inside the block (innermost
  first; an explicit ``cfg=`` still wins). Keys are libejk op names (``flash_attention``,
  ``flash_attention_backward``), read when a call is traced: a ``jax.jit`` function traced
  before the block keeps its values.

The seed's framework for users' own kernels (``Kernel``, ``Executor``, ``ConfigCache``, ...)
has no counterpart: those names exist and raise NotImplementedError naming themselves.
"""
import ctypes
import dataclasses
import os
from typing import TypeVar

from .. import _kit, _lib

Cfg = TypeVar("Cfg")
Out = TypeVar("Out")

_FALLBACKS = ("autotune", "heuristics")
_ENV = "EJKERNEL_AUTOTUNE_POLICY"


@dataclasses.dataclass
class FwdParams:
    """The seed's forward kernel parameters; as cfg's fwd_params, q_blocksize and kv_blocksize are
    flash_attention's block_q and block_k (the others have no counterpart: NotImplementedError)."""
    blocksize_m: int | None = None
    blocksize_k: int | None = None
    blocksize_n: int | None = None
    q_blocksize: int | None = None
    kv_blocksize: int | None = None
    blocksize_heads: int | None = None
    blocksize_keys: int | None = None
    num_key_splits: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None


@dataclasses.dataclass
class BwdParams:
    """The seed's backward kernel parameters (a cfg's bwd_params is refused: the backward's values
    are an overlay_cache entry for flash_attention_backward)."""
    blocksize_m: int | None = None
    blocksize_k: int | None = None
    blocksize_n: int | None = None
    q_blocksize: int | None = None
    kv_blocksize: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None


@dataclasses.dataclass
class AutotunePolicy:
    """The seed's policy fields. allow_heuristics=False cannot be honoured: the spec's heuristic
    is always the engine's last resort."""
    allow_autotune: bool = True
    allow_heuristics: bool = True
    cache_miss_fallback: str = "autotune"
    validate_backward: bool = False

    def autotunes(self):
        return self.allow_autotune and self.cache_miss_fallback == "autotune"


def _check(policy):
    if not isinstance(policy, AutotunePolicy):
        raise _kit.ArgumentTypeError(f"policy: expected an ejk.ops.AutotunePolicy or one of {_FALLBACKS}, got "
                                     f"{type(policy).__name__}")
    if policy.cache_miss_fallback not in _FALLBACKS:
        raise ValueError(f"cache_miss_fallback: expected 'autotune' or 'heuristics', got "
                         f"{policy.cache_miss_fallback!r}")
    for name in ("allow_autotune", "allow_heuristics", "validate_backward"):
        if not isinstance(getattr(policy, name), bool):
            raise _kit.ArgumentTypeError(f"{name}: expected a bool, got {getattr(policy, name)!r}")
    if not policy.allow_heuristics:
        raise NotImplementedError("allow_heuristics=False: ejkernel (C++) always falls back to the spec's heuristic")


def engine_setting(policy):
    """What libejk autotunes under `policy`: "0", "1" (every op) or the forward ops' names."""
    if not policy.autotunes():
        return "0"
    if policy.validate_backward:
        return "1"
    return ",".join(op for op in _kit.op_names() if not op.endswith("_backward"))


_lib.libejk().ejk_set_autotune.argtypes = [ctypes.c_char_p]
_policy = None          # the process's policy; None: libejk follows EJK_AUTOTUNE
_backward_off = 0       # forward_autotune_only blocks active


def _apply():
    if _policy is None:
        return
    policy = dataclasses.replace(_policy, validate_backward=_policy.validate_backward and not _backward_off)
    lib = _lib.libejk()
    _lib.raise_for(lib.ejk_set_autotune(engine_setting(policy).encode()), lib)


def get_autotune_policy():
    """A copy of the process's policy (EJK_AUTOTUNE's, where none was set)."""
    if _policy is not None:
        return dataclasses.replace(_policy)
    value = os.environ.get("EJK_AUTOTUNE", "0").strip().lower()
    autotune = value not in ("", "0", "false", "no", "off")
    return AutotunePolicy(cache_miss_fallback="autotune" if autotune else "heuristics",
                          validate_backward=value in ("1", "true", "yes", "on"))


def set_autotune_policy(policy):
    """Sets the process's policy: an AutotunePolicy, "autotune" or "heuristics" (the values of
    EJKERNEL_AUTOTUNE_POLICY; with validate_backward, as the seed's flash_attention), or None:
    libejk follows EJK_AUTOTUNE again."""
    global _policy
    if policy is None:
        _policy = None
        lib = _lib.libejk()
        _lib.raise_for(lib.ejk_set_autotune(None), lib)
        return
    if isinstance(policy, str):
        if policy not in _FALLBACKS:
            raise ValueError(f"policy: expected 'autotune' or 'heuristics', got {policy!r}")
        policy = AutotunePolicy(cache_miss_fallback=policy, validate_backward=True)
    _check(policy)
    _policy = dataclasses.replace(policy)
    _apply()


class policy_override:
    """The seed's ``policy_override(selector, **updates)``: the process's policy with `updates`
    while the block runs. `selector` is None (ejkernel has one engine-wide policy)."""

    def __init__(self, selector=None, **updates):
        if selector is not None:
            raise NotImplementedError("policy_override: selector: ejkernel (C++) has no config selector objects; "
                                      "give None to override the process's policy")
        fields = {f.name for f in dataclasses.fields(AutotunePolicy)}
        unknown = sorted(set(updates) - fields)
        if unknown:
            raise TypeError(f"policy_override: no policy field {', '.join(unknown)} (its fields: "
                            f"{', '.join(sorted(fields))})")
        self.updates = updates
        self._previous = None

    def __enter__(self):
        global _policy
        self._previous = _policy
        updated = dataclasses.replace(get_autotune_policy(), **self.updates)
        _check(updated)
        _policy = updated
        _apply()
        return self

    def __exit__(self, *exc):
        set_autotune_policy(self._previous)


class forward_autotune_only:
    """While active, autotuning times the forward ops only, even under validate_backward."""

    def __enter__(self):
        global _backward_off
        _backward_off += 1
        _apply()
        return self

    def __exit__(self, *exc):
        global _backward_off
        _backward_off -= 1
        _apply()


class overlay_cache:
    """The seed's scoped overlay, keyed by op name: ``with overlay_cache({"flash_attention":
    {"block_q": 64}}):`` calls of that op traced inside use these tuning values unless they give
    cfg= themselves; nested overlays are searched innermost first. Keys and axis names are
    checked on construction, values by libejk at the call."""

    def __init__(self, mapping):
        if not hasattr(mapping, "items"):
            raise _kit.ArgumentTypeError(f"mapping: expected a mapping of op names to cfgs, got "
                                         f"{type(mapping).__name__}")
        ops = _kit.op_names()
        for key, cfg in mapping.items():
            if isinstance(key, tuple):
                raise NotImplementedError(f"overlay_cache: key {key!r}: the seed's (device, op_id, call_key) keys have "
                                          "no counterpart; ejkernel (C++) overlays are keyed by op name")
            if key not in ops:
                raise ValueError(f"overlay_cache: {key!r} is not an op (the ops: {', '.join(ops)})")
            _kit.tune_entries(key, {} if cfg is None else cfg)
        self.mapping = dict(mapping)
        self._token = None

    def __enter__(self):
        self._token = _kit.OVERLAYS.set(_kit.OVERLAYS.get() + (self.mapping,))
        return self

    def __exit__(self, *exc):
        _kit.OVERLAYS.reset(self._token)


def _unsupported(name, instead):
    """A name of the seed's with nothing behind it here: using it raises NotImplementedError."""
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"ejk.ops.{name}: ejkernel (C++) has no counterpart of the seed's {name}; {instead}")

    if name[0].isupper():
        return type(name, (), {"__init__": refuse, "__doc__": f"Not available: {instead}", "__module__": __name__})
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Not available: {instead}"
    return refuse


_STORE = "choices are libejk's: cfg=, overlay_cache, the tuning store (ejk tune) and its heuristic"
_UNSUPPORTED = {
    **{n: "ejkernel's ops are libejk's, not Python kernel classes" for n in (
        "Kernel", "Invocation", "Executor", "ConfigChooser", "Entry", "vmap_with_config", "pmap_with_config",
        "record_invocation", "get_invocations", "abstractify")},
    **{n: _STORE for n in ("ConfigCache", "PersistentCache", "ConfigSelectorChain", "Tuner", "Autotuner",
                           "FNAutotuner", "AutotuneData", "AutotuningResult", "Measurement", "autotune",
                           "autotune_recorded", "benchmark")},
    **{n: "libejk keys its tuning records by its own device fingerprint and problem class" for n in (
        "device_fingerprint", "device_kind", "get_device_platform", "sharding_fingerprint",
        "default_key_builder_with_sharding", "short_hash", "stable_json", "to_json", "from_json", "label",
        "labels_to_configs", "extract_labels_from_hlo_text", "find_labels_in_lowered")},
    **{n: "in-call autotuning shows no progress bar (`ejk tune` reports each candidate)" for n in (
        "log_autotune_progress", "set_autotune_progress")},
}
globals().update({name: _unsupported(name, instead) for name, instead in _UNSUPPORTED.items()})

HONOURED = ("AutotunePolicy", "BwdParams", "Cfg", "FwdParams", "Out", "forward_autotune_only", "get_autotune_policy", "overlay_cache",
            "policy_override", "set_autotune_policy")
__all__ = tuple(sorted(HONOURED + tuple(_UNSUPPORTED)))


def _from_environment():
    """EJKERNEL_AUTOTUNE_POLICY, as the seed reads it when its ops are imported."""
    value = os.environ.get(_ENV)
    if value:
        try:
            set_autotune_policy(value.strip().lower())
        except ValueError:
            raise ValueError(f"{_ENV}={value!r}: expected 'autotune' or 'heuristics'") from None


_from_environment()
