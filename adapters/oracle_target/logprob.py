"""Oracle-target operations for `logprob`: padded tensors -> ragged lists -> oracle -> padded."""


class LogprobOps:
    """`logprob` operations that delegate to `rlconform.oracle.logprob`."""
