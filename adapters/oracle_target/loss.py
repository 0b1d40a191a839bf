"""Oracle-target operations for `loss`: padded tensors -> ragged lists -> oracle -> padded."""


class LossOps:
    """`loss` operations that delegate to `rlconform.oracle.loss`."""
