"""MaskInfo on torch tensors: ``ejkernel.types.MaskInfo``'s constructors, compositions and
accessors (structure.py's, the same logic as the JAX one in mask.py), for
``ejk.torch.flash_attention(..., mask_info=...)`` and the other ops that take one. New tensors
go to the device of the MaskInfo's own; a structural mask (segment ids, causal, window, chunks)
lowers without reading a value on the host, so it needs no graph break under torch.compile.
A pytree (torch.utils._pytree), as the JAX one is JAX's. No JAX needed."""
import contextlib
import functools

import numpy as np
import torch
import torch.utils._pytree as pytree

from . import structure
from .structure import Lowered, MaskStructure  # noqa: F401 (Lowered: what lower() returns)


def _device(like):
    return like.device if isinstance(like, torch.Tensor) else None


def _reduce(fn, x, axis=None):
    return fn(x) if axis is None else fn(x, dim=axis)


class TorchArrays:
    """The array operations MaskStructure uses, in PyTorch; `like` is a tensor whose device a
    new one takes."""
    bool_, int32, float32, uint8 = torch.bool, torch.int32, torch.float32, torch.uint8
    where, clip, broadcast_to, finfo = torch.where, torch.clamp, torch.broadcast_to, torch.finfo

    @staticmethod
    def asarray(x, dtype=None, like=None):
        device = _device(like) if like is not None else _device(x)
        return torch.as_tensor(x, dtype=dtype, device=device)

    @staticmethod
    def arange(n, dtype, like=None):
        return torch.arange(n, dtype=dtype, device=_device(like))

    @staticmethod
    def ones(shape, dtype, like=None):
        return torch.ones(shape, dtype=dtype, device=_device(like))

    @staticmethod
    def zeros(shape, dtype, like=None):
        return torch.zeros(shape, dtype=dtype, device=_device(like))

    @staticmethod
    def astype(x, dtype):
        return torch.as_tensor(x).to(dtype)

    @staticmethod
    def dtype(d):
        """A torch dtype from a torch, NumPy or JAX dtype or its name."""
        if isinstance(d, torch.dtype):
            return d
        name = d if isinstance(d, str) else getattr(d, "name", None) or np.dtype(d).name
        found = getattr(torch, "bool" if name == "bool_" else name, None)
        if not isinstance(found, torch.dtype):
            raise ValueError(f"dtype: {d!r} is no torch dtype")
        return found

    all, any, sum = (staticmethod(functools.partial(_reduce, f)) for f in (torch.all, torch.any, torch.sum))
    amin, amax = (staticmethod(functools.partial(_reduce, f)) for f in (torch.amin, torch.amax))

    @staticmethod
    def cumsum(x, axis):
        return torch.cumsum(x, dim=axis)

    @staticmethod
    def cummax(x, axis):
        return torch.cummax(x, dim=axis).values

    @staticmethod
    def concatenate(xs, axis=0):
        return torch.cat(xs, dim=axis)

    @staticmethod
    def take_along(x, index, axis):
        return torch.take_along_dim(x, index.long(), dim=axis)

    @staticmethod
    def swap_last(x):
        return x.transpose(-1, -2)

    @staticmethod
    def array_equal(a, b):
        return tuple(a.shape) == tuple(b.shape) and torch.equal(a, b)

    @staticmethod
    def is_concrete(x):
        """Its values can be read now: not while torch.compile traces (reading one there would
        break the graph)."""
        return not torch.compiler.is_compiling()

    @staticmethod
    def eager():
        return contextlib.nullcontext()

    @staticmethod
    def to_numpy(x):
        return x.detach().cpu().numpy()

    @staticmethod
    def bernoulli(seed, p, shape):
        generator = torch.Generator().manual_seed(seed)
        return torch.rand(shape, generator=generator) < p


segment_ids_to_mask, mask_to_segment_ids = structure.helpers(TorchArrays, torch.bool)


class MaskInfo(MaskStructure):
    """Attention mask information, as ``ejkernel.types.MaskInfo`` (same constructors, methods and
    results; a dense mask only when one is asked for), on torch tensors. Build it with
    from_segments, from_attention_mask or from_cu_seqlens; compose with apply_*; pass it as
    ``ejk.torch.flash_attention(..., mask_info=...)``. from_random draws with a torch.Generator
    (the same mask for the same seed, not the JAX one's draw)."""
    xp = TorchArrays


def _flatten(info):
    """The tensors as children (torch's pytree keeps None as a leaf: absent ones are left out,
    their names with the static fields as the context)."""
    children, aux = info.tree_flatten()
    names = tuple(n for n, x in zip(MaskInfo._CHILDREN, children) if x is not None)
    return [x for x in children if x is not None], (names, aux)


def _unflatten(children, context):
    names, aux = context
    return MaskInfo(**dict(zip(names, children)), **dict(aux))


pytree.register_pytree_node(MaskInfo, _flatten, _unflatten, serialized_type_name="ejk.types.torch.MaskInfo")

__all__ = ["MaskInfo", "mask_to_segment_ids", "segment_ids_to_mask"]
