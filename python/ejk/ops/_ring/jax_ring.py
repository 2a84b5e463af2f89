"""ring_attention's JAX side: the ring under shard_map (lax.ppermute one hop forward per step),
the per-device schedule chosen by lax.switch on the device index (a fully masked block is a
branch with no kernel), and jax.custom_vjp around the whole ring so the backward is the ring of
flash_attention_backward calls (ring_attention.backward) rather than autodiff of the loop."""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from .. import ring_attention as _ring

_SPECS = ("query", "key", "value", "softmax_aux", "bias")


class _Sent:
    """A ppermute's results: JAX schedules the transfer; there is nothing to wait for here."""

    def __init__(self, values):
        self.values = values

    def wait(self):
        return self.values


class Backend:
    """What ring_attention's loops call, for one schedule under shard_map's axis `axis`."""

    def __init__(self, fw, schedule, axis):
        self.fw, self.schedule, self.axis, self.n = fw, schedule, axis, schedule.n
        self.scalars = dict(schedule.scalars)

    def send_next(self, xs):
        hop = [(i, (i + 1) % self.n) for i in range(self.n)]
        return _Sent(tuple(lax.ppermute(x, self.axis, hop) for x in xs))

    def same_calls(self, step):
        """Whether every device runs the same calls at `step` (else a lax.switch picks them)."""
        return len(set(self.schedule.plans(step))) == 1

    def step(self, step, fn, state, kv):
        """fn(calls, state, kv) with this device's calls at `step`: a lax.switch over the
        distinct schedules of the devices, or a plain call where they all have one."""
        plans = self.schedule.plans(step)
        distinct = list(dict.fromkeys(plans))
        if len(distinct) == 1:
            return fn(distinct[0], state, kv)
        which = jnp.asarray([distinct.index(p) for p in plans], jnp.int32)[lax.axis_index(self.axis)]
        return lax.switch(which, [functools.partial(fn, p) for p in distinct], state, kv)

    def _mask(self, c):
        return dict(causal=c.causal, sliding_window=c.window, **self.scalars)

    def flash(self, q, k, v, c, extra):
        r = self.fw.call("flash_attention", q=q, k=k, v=v, **extra, **self._mask(c))
        return r["out"], r["lse"]

    def flash_backward(self, q, k, v, out, lse, d_out, c, extra):
        r = self.fw.call("flash_attention_backward", q=q, k=k, v=v, out=out, lse=lse, d_out=d_out, **extra,
                         **self._mask(c))
        return tuple(r[name] for name in ("dq", "dk", "dv")) + ((r["dbias"],) if "bias" in extra else ())

    def shard_start(self, step):
        """The first key column of the visiting shard at `step` in the bias (the ring's keys in
        device order): a static 0 on a ring of one, else from this device's index."""
        if self.n == 1:
            return 0
        return ((lax.axis_index(self.axis) - step) % self.n) * self.schedule.sk

    @staticmethod
    def bias_block(bias, col, c):
        rows = bias[:, :, c.q0:c.q0 + c.nq]
        if isinstance(col, int):
            return rows[..., col:col + c.nk]
        return lax.dynamic_slice_in_dim(rows, col, c.nk, axis=3)

    @staticmethod
    def add_bias_block(acc, col, c, g):
        start = (0, 0, c.q0, col)
        block = lax.dynamic_slice(acc, start, acc.shape[:2] + (c.nq, c.nk))
        return lax.dynamic_update_slice(acc, block + g, start)

    def merge(self, out_a, lse_a, out_b, lse_b):
        r = self.fw.call("merge_attention_states", out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b)
        return r["out"], r["lse"]

    @staticmethod
    def put(acc, axis, start, x):
        return lax.dynamic_update_slice_in_dim(acc, x, start, axis)

    @staticmethod
    def add(acc, axis, start, x):
        index = (slice(None),) * axis + (slice(start, start + x.shape[axis]),)
        return acc.at[index].add(x)

    @staticmethod
    def f32(x):
        return x.astype(jnp.float32)

    @staticmethod
    def zeros_like(x):
        return jnp.zeros(x.shape, jnp.float32)

    @staticmethod
    def empty_lse(q):
        return jnp.full((q.shape[0], q.shape[2], q.shape[1]), -jnp.inf, jnp.float32)


def _sink_lse(aux):
    """The sinks' log-sum-exp per head, broadcastable to lse [B, Hq, Sq]."""
    s = jax.nn.logsumexp(aux, axis=-1)
    return s[None, :, None] if aux.ndim == 2 else s


def add_sinks(out, lse, aux):
    """out, lse of the keys, with the sinks joining the denominator once."""
    total = jnp.logaddexp(lse, _sink_lse(aux))
    return out * jnp.exp(lse - total).transpose(0, 2, 1)[..., None], total


def sink_gradient(aux, lse, out, d_out):
    """d softmax_aux: a sink's probability p scales every output by (1 - p) in effect, so its
    gradient is -sum over rows of p * (d_out . out)."""
    rows = jnp.einsum("bshd,bshd->bhs", d_out.astype(jnp.float32), out.astype(jnp.float32))
    heads = aux if aux.ndim == 2 else jnp.broadcast_to(aux, (lse.shape[1],) + aux.shape)
    p = jnp.exp(heads[None, :, None, :] - lse[..., None])
    d = -jnp.einsum("bhst,bhs->ht", p, rows)
    return d if aux.ndim == 2 else d.sum(0)


def _varying(x):
    """The mesh axes x varies along under shard_map's check_vma (none where it is off)."""
    t = jax.typeof(x)
    if hasattr(t, "vma"):
        return frozenset(t.vma)
    return frozenset(getattr(getattr(t, "manual_axis_type", None), "varying", ()))


def _varying_as(y, x):
    """y marked varying along the mesh axes x varies along (shard_map's check_vma): the FFI's
    results carry none, and typed as replicated their cotangents would be taken as every
    device's at once."""
    if not hasattr(jax, "typeof"):
        return y
    missing = _varying(x) - _varying(y)
    return lax.pcast(y, tuple(sorted(missing)), to="varying") if missing else y


def _gradient_as(g, x):
    """Gradient g typed as primal x: summed over the axes x does not vary along (a replicated
    input's gradient is the sum of every device's), marked varying along those it does."""
    if hasattr(jax, "typeof"):
        extra = _varying(g) - _varying(x)
        if extra:
            g = lax.psum(g, tuple(sorted(extra)))
    return _varying_as(g, x)


@functools.lru_cache(maxsize=None)
def _differentiable(fw, schedule, axis):
    be = Backend(fw, schedule, axis)

    def forward(q, k, v, aux, bias, ids):
        out, lse = _ring.forward(be, q, k, v, *ids, bias)
        if aux is not None:
            out, lse = add_sinks(out, lse, aux)
        return _varying_as(out.astype(q.dtype), q), _varying_as(lse, q)

    @jax.custom_vjp
    def ring(q, k, v, aux, bias, ids):
        return forward(q, k, v, aux, bias, ids)[0]

    def fwd(q, k, v, aux, bias, ids):
        out, lse = forward(q, k, v, aux, bias, ids)
        return out, (q, k, v, aux, bias, ids, out, lse)

    def bwd(saved, d_out):
        q, k, v, aux, bias, ids, out, lse = saved
        dq, dk, dv, d_bias = _ring.backward(be, q, k, v, out, lse, d_out.astype(q.dtype), *ids, bias)
        d_aux = None if aux is None else _gradient_as(sink_gradient(aux, lse, out, d_out), aux)
        d_bias = None if bias is None else _gradient_as(d_bias.astype(bias.dtype), bias)
        return (_gradient_as(dq.astype(q.dtype), q), _gradient_as(dk.astype(k.dtype), k),
                _gradient_as(dv.astype(v.dtype), v), d_aux, d_bias, None)

    ring.defvjp(fwd, bwd)
    return ring


def _local(fw, layout, band, scalars, axis):
    """The ring on one device's shards (inside shard_map when axis is given)."""
    def run(q, k, v, aux=None, bias=None, ids=(None, None)):
        n = 1 if axis is None else lax.axis_size(axis)
        _ring.check_lengths(layout, q, k)
        if bias is not None and _ring.bias_rows(bias, q, k, n) == "ring":
            # This device's rows, outside the custom gradient: JAX's transpose of the slice (and
            # shard_map's of a replicated input) gives the whole bias its gradient.
            bias = lax.dynamic_slice_in_dim(bias, lax.axis_index(axis) * q.shape[1], q.shape[1], axis=2)
        schedule = _ring.Schedule(n, layout, q.shape[1], k.shape[1], band, tuple(sorted(scalars.items())))
        return _differentiable(fw, schedule, axis)(q, k, v, aux, bias, ids)
    return run


def _check_sharding(axis, mesh, in_specs, out_specs, names, operands):
    from ... import _sharding
    _sharding.check_mesh(mesh)
    if axis is None or axis not in mesh.axis_names:
        raise ValueError(f"axis_name: expected the mesh axis that splits the sequence (one of "
                         f"{', '.join(map(repr, mesh.axis_names))}), got {axis!r}")
    if (not isinstance(in_specs, (tuple, list)) or isinstance(in_specs, PartitionSpec)
            or len(in_specs) not in (len(_SPECS) - 1, len(_SPECS))):
        raise ValueError(f"in_specs: expected {len(_SPECS)} PartitionSpecs (None for an argument not given), one for "
                         f"each of {', '.join(_SPECS)}, in this order (bias's may be left out); got {in_specs!r}")
    specs = []
    for name, x in zip(names, operands):
        i = _SPECS.index(name)
        spec = PartitionSpec() if i >= len(in_specs) or in_specs[i] is None else in_specs[i]
        _sharding.check_spec(f"in_specs[{i}] ({name})", spec, x.shape, mesh)
        if i < 3 and _sharding.normal(spec, 4)[1] != axis:
            raise ValueError(f"in_specs[{i}] ({name}): expected the sequence axis (axis 1) split over "
                             f"axis_name {axis!r}, got {spec}")
        if name == "bias" and _sharding.normal(spec, 4)[3] is not None:
            raise ValueError(f"in_specs[{i}] (bias): expected its key axis (axis 3) whole (each device's rows "
                             f"meet every key), got {spec}")
        specs.append(spec)
    if not isinstance(out_specs, PartitionSpec) or _sharding.normal(out_specs, 4) != _sharding.normal(specs[0], 4):
        raise ValueError(f"out_specs: expected {specs[0]}, as query's in_specs[0] shards it, got {out_specs!r}")
    return specs


def run(fw, layout, q, k, v, aux, bias, band, scalars, axis, sharding, ids=None):
    from ... import _sharding
    mesh, in_specs, out_specs = sharding
    local = _local(fw, layout, band, scalars, axis)
    if not _sharding.requested(mesh, in_specs, out_specs):
        return local(q, k, v, aux, bias, ids or (None, None))
    names = [name for name, x in zip(_SPECS, (q, k, v, aux, bias)) if x is not None]
    operands = [x for x in (q, k, v, aux, bias) if x is not None]
    specs = _check_sharding(axis, mesh, in_specs, out_specs, names, operands)

    def body(*xs):
        given = dict(zip(names, xs))
        return local(*xs[:3], given.get("softmax_aux"), given.get("bias"))
    return _sharding.run(body, mesh, specs, out_specs, operands)
