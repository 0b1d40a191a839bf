"""torchref operations for the CONTRACT area `batch` (vectorized torch, any device)."""


class BatchOps:
    """Vectorized `batch` operations in the canonical padded layout."""
