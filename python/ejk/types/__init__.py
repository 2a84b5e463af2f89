"""The seed's ``ejkernel.types``: ``MaskInfo`` (JAX arrays, a pytree) and its helpers,
``segment_ids_to_mask`` and ``mask_to_segment_ids``; ``ejk.types.torch`` has the same on torch
tensors. JAX is imported when one of these names is first read, so ``ejk.types.torch`` needs no
JAX."""

__all__ = ["MaskInfo", "MaskSharding", "mask_to_segment_ids", "segment_ids_to_mask"]


def __getattr__(name):
    if name in __all__:
        from . import mask
        return getattr(mask, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
