"""Oracle-target operations for `kl`: padded tensors -> ragged lists -> oracle -> padded."""


class KLOps:
    """`kl` operations that delegate to `rlconform.oracle.kl`."""
