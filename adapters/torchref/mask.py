"""torchref operations for the CONTRACT area `mask` (vectorized torch, any device)."""


class MaskOps:
    """Vectorized `mask` operations in the canonical padded layout."""
