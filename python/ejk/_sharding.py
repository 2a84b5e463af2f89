"""shard_map over a mesh for ejk.jax's ops: ``mesh=``, ``in_specs=``, ``out_specs=`` as
``ejkernel.modules`` takes them. Each device runs the op (one FFI call) on its local shard; the
specs are checked against the mesh and the global shapes first, so a bad one is a ValueError
naming the argument rather than an error from inside shard_map.
"""
import math

import jax
from jax.sharding import PartitionSpec

try:
    _MESH_TYPES = (jax.sharding.Mesh, jax.sharding.AbstractMesh)
except AttributeError:
    _MESH_TYPES = (jax.sharding.Mesh,)


def requested(mesh, in_specs, out_specs):
    """Whether to shard: as in ejkernel.modules, only when all three are given; otherwise the
    call runs unsharded (a mesh alone is ignored, not an error)."""
    return mesh is not None and in_specs is not None and out_specs is not None


def _shard_map(f, mesh, in_specs, out_specs):
    # check_vma off, as ejkernel.modules passes it; the caller checks out_specs against the
    # operands' specs instead.
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    from jax.experimental.shard_map import shard_map
    return shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def check_mesh(mesh):
    if not isinstance(mesh, _MESH_TYPES):
        raise ValueError(f"mesh: expected a jax.sharding.Mesh, got {type(mesh).__name__}")


def check_spec(where, spec, shape, mesh):
    """A PartitionSpec for an array of global `shape`: its rank, its mesh axes, divisibility."""
    if not isinstance(spec, PartitionSpec):
        raise ValueError(f"{where}: expected a jax.sharding.PartitionSpec, got {spec!r}")
    if len(spec) > len(shape):
        raise ValueError(f"{where}: {spec} has {len(spec)} entries for an array of rank {len(shape)} "
                         f"(shape {tuple(shape)})")
    for dim, (size, entry) in enumerate(zip(shape, spec)):
        if entry is None:
            continue
        names = entry if isinstance(entry, tuple) else (entry,)
        for name in names:
            if name not in mesh.axis_names:
                raise ValueError(f"{where}: {spec} names mesh axis {name!r}, which the mesh lacks "
                                 f"(its axes: {', '.join(map(repr, mesh.axis_names))})")
        parts = math.prod(mesh.shape[name] for name in names)
        if size % parts:
            raise ValueError(f"{where}: {spec} splits axis {dim} (size {size}) into {parts} parts, "
                             f"which does not divide it")


def normal(spec, rank):
    """spec with one entry per axis, a single mesh axis as its name: specs that shard alike compare equal."""
    entries = tuple(e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in spec)
    return entries + (None,) * (rank - len(entries))


def run(op, mesh, in_specs, out_specs, operands):
    """op(*operands) under shard_map; in_specs: one PartitionSpec per operand."""
    return _shard_map(op, mesh, tuple(in_specs), out_specs)(*operands)
