"""torchref operations for the CONTRACT area `offpolicy` (vectorized torch, any device)."""


class OffpolicyOps:
    """Vectorized `offpolicy` operations in the canonical padded layout."""
