"""Oracle-target operations for `layout`: padded tensors -> ragged lists -> oracle -> padded."""


class LayoutOps:
    """`layout` operations that delegate to `rlconform.oracle.layout`."""
