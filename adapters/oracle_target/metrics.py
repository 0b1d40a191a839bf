"""Oracle-target operations for `metrics`: padded tensors -> ragged lists -> oracle -> padded."""


class MetricsOps:
    """`metrics` operations that delegate to `rlconform.oracle.metrics`."""
