"""torchref operations for the CONTRACT area `loss` (vectorized torch, any device)."""


class LossOps:
    """Vectorized `loss` operations in the canonical padded layout."""
