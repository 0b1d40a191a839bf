"""Oracle-target operations for `filter`: padded tensors -> ragged lists -> oracle -> padded."""


class FilterOps:
    """`filter` operations that delegate to `rlconform.oracle.filter`."""
