"""torchref operations for the CONTRACT area `metrics` (vectorized torch, any device)."""


class MetricsOps:
    """Vectorized `metrics` operations in the canonical padded layout."""
