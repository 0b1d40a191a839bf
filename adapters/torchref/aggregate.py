"""torchref operations for the CONTRACT area `aggregate` (vectorized torch, any device)."""


class AggregateOps:
    """Vectorized `aggregate` operations in the canonical padded layout."""
