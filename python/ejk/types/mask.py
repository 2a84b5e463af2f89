"""MaskInfo, as ``ejkernel.types.MaskInfo``: which keys each query may see, built from segment
ids, padding masks, cu_seqlens or a dense mask, and composed (causal, sliding window, chunks,
token types, KV lengths), on JAX arrays; a pytree. Its logic is structure.py's, shared with
``ejk.types.torch.MaskInfo``; here are JAX's array operations and what only JAX has (pytrees,
shardings)."""
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from . import structure
from .structure import Lowered, MaskStructure  # noqa: F401 (Lowered: what lower() returns)


class JaxArrays:
    """The array operations MaskStructure uses, in JAX (`like` places new arrays in PyTorch;
    JAX needs no device)."""
    bool_, int32, float32, uint8 = jnp.bool_, jnp.int32, jnp.float32, jnp.uint8
    where, clip, broadcast_to, cumsum, finfo = jnp.where, jnp.clip, jnp.broadcast_to, jnp.cumsum, jnp.finfo
    all, any, amin, amax, sum = jnp.all, jnp.any, jnp.min, jnp.max, jnp.sum
    array_equal = jnp.array_equal

    @staticmethod
    def asarray(x, dtype=None, like=None):
        return jnp.asarray(x, dtype)

    @staticmethod
    def arange(n, dtype, like=None):
        return jnp.arange(n, dtype=dtype)

    @staticmethod
    def ones(shape, dtype, like=None):
        return jnp.ones(shape, dtype)

    @staticmethod
    def zeros(shape, dtype, like=None):
        return jnp.zeros(shape, dtype)

    @staticmethod
    def astype(x, dtype):
        return jnp.asarray(x).astype(dtype)

    @staticmethod
    def dtype(d):
        return np.dtype(d)

    @staticmethod
    def concatenate(xs, axis=0):
        return jnp.concatenate(xs, axis=axis)

    @staticmethod
    def cummax(x, axis):
        return jax.lax.cummax(x, axis=axis % x.ndim)

    @staticmethod
    def take_along(x, index, axis):
        return jnp.take_along_axis(x, index, axis=axis)

    @staticmethod
    def swap_last(x):
        return jnp.swapaxes(x, -1, -2)

    @staticmethod
    def is_concrete(x):
        """Not a tracer: its values are known now."""
        return not isinstance(x, jax.core.Tracer)

    @staticmethod
    def eager():
        """Evaluates now what a traced function computes from concrete arrays."""
        return jax.ensure_compile_time_eval()

    @staticmethod
    def to_numpy(x):
        return np.asarray(jax.device_get(x))

    @staticmethod
    def bernoulli(seed, p, shape):
        return jax.random.bernoulli(jax.random.PRNGKey(seed), p=p, shape=shape)


class MaskSharding(NamedTuple):
    """PartitionSpecs of a MaskInfo's arrays (None where it has no such array), as the seed's."""
    attention_mask: PartitionSpec | None
    q_segment_ids: PartitionSpec | None
    kv_segment_ids: PartitionSpec | None
    cu_seqlens_q: PartitionSpec | None
    cu_seqlens_kv: PartitionSpec | None
    q_positions: PartitionSpec | None
    kv_positions: PartitionSpec | None


segment_ids_to_mask, mask_to_segment_ids = structure.helpers(JaxArrays, jnp.bool_)


@jax.tree_util.register_pytree_node_class
class MaskInfo(MaskStructure):
    """Attention mask information, as ``ejkernel.types.MaskInfo`` (same constructors, methods and
    results; a dense mask only when one is asked for), on JAX arrays; a pytree. Build it with
    from_segments, from_attention_mask or from_cu_seqlens; compose with apply_*; pass it as
    ``flash_attention(..., mask_info=...)``."""
    xp = JaxArrays

    @staticmethod
    def get_empty_sharding():
        return MaskSharding(*(None,) * len(MaskSharding._fields))

    def get_shardings(self, sequence_parallel=False, *, mesh):
        """PartitionSpecs for the arrays (the seed's: mask (batch, qheads, seq?, None), ids and
        positions (batch, seq?)); an axis is left unsharded where the mesh does not divide it."""
        names = set(mesh.axis_names)
        seq = self.sequence_axis_name if sequence_parallel else None
        for label, given in (("qheads_axis_name", self.qheads_axis_name), ("batch_axis_name", self.batch_axis_name),
                             ("sequence_axis_name", seq)):
            for axis in (given if isinstance(given, tuple) else (given,)) if given is not None else ():
                if axis not in names:
                    raise ValueError(f"{label}: mesh axis {axis!r} is not in the mesh (its axes: {sorted(names)})")

        def fit(shape, *entries):
            out = []
            for size, entry in zip(shape, entries):
                axes = entry if isinstance(entry, tuple) else (entry,) if entry is not None else ()
                out.append(entry if size % math.prod(mesh.shape[a] for a in axes) == 0 else None)
            return PartitionSpec(*out)

        mask = self._attention_mask
        row = (self.batch_axis_name, seq)
        return MaskSharding(
            None if mask is None else fit(mask.shape, self.batch_axis_name, self.qheads_axis_name, seq, None),
            None if self._q_segment_ids is None else fit(self._q_segment_ids.shape, *row),
            None if self._kv_segment_ids is None else fit(self._kv_segment_ids.shape, *row),
            None, None,
            None if self.q_positions is None else fit(self.q_positions.shape, *row),
            None if self.kv_positions is None else fit(self.kv_positions.shape, *row))
