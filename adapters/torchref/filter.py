"""torchref operations for the CONTRACT area `filter` (vectorized torch, any device)."""


class FilterOps:
    """Vectorized `filter` operations in the canonical padded layout."""
