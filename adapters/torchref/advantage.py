"""torchref operations for the CONTRACT area `advantage` (vectorized torch, any device)."""


class AdvantageOps:
    """Vectorized `advantage` operations in the canonical padded layout."""
