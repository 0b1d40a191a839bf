"""Oracle-target operations for `offpolicy`: padded tensors -> ragged lists -> oracle -> padded."""


class OffpolicyOps:
    """`offpolicy` operations that delegate to `rlconform.oracle.offpolicy`."""
