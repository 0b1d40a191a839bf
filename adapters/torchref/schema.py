"""torchref operations for the CONTRACT area `schema` (vectorized torch, any device)."""


class SchemaOps:
    """Vectorized `schema` operations in the canonical padded layout."""
