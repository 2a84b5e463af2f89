"""The seed's ``ejkernel.types``: ``MaskInfo`` (JAX arrays, a pytree) and its helpers,
``segment_ids_to_mask`` and ``mask_to_segment_ids``."""
from .mask import MaskInfo, MaskSharding, mask_to_segment_ids, segment_ids_to_mask

__all__ = ["MaskInfo", "MaskSharding", "mask_to_segment_ids", "segment_ids_to_mask"]
