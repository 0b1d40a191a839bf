"""torchref operations for the CONTRACT area `layout` (vectorized torch, any device)."""


class LayoutOps:
    """Vectorized `layout` operations in the canonical padded layout."""
