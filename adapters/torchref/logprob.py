"""torchref operations for the CONTRACT area `logprob` (vectorized torch, any device)."""


class LogprobOps:
    """Vectorized `logprob` operations in the canonical padded layout."""
