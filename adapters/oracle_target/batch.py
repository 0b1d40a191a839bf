"""Oracle-target operations for `batch`: padded tensors -> ragged lists -> oracle -> padded."""


class BatchOps:
    """`batch` operations that delegate to `rlconform.oracle.batch`."""
