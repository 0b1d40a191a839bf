"""Oracle-target operations for `schema`: padded tensors -> ragged lists -> oracle -> padded."""


class SchemaOps:
    """`schema` operations that delegate to `rlconform.oracle.schema`."""
