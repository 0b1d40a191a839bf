"""Oracle-target operations for `advantage`: padded tensors -> ragged lists -> oracle -> padded."""


class AdvantageOps:
    """`advantage` operations that delegate to `rlconform.oracle.advantage`."""
