"""Oracle-target operations for `mask`: padded tensors -> ragged lists -> oracle -> padded."""


class MaskOps:
    """`mask` operations that delegate to `rlconform.oracle.mask`."""
