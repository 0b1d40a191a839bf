"""torchref operations for the CONTRACT area `kl` (vectorized torch, any device)."""


class KLOps:
    """Vectorized `kl` operations in the canonical padded layout."""
