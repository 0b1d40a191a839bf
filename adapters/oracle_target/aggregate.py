"""Oracle-target operations for `aggregate`: padded tensors -> ragged lists -> oracle -> padded."""


class AggregateOps:
    """`aggregate` operations that delegate to `rlconform.oracle.aggregate`."""
