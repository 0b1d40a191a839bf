"""Oracle for the CONTRACT area `logprob` (standard library only, ragged lists, float64)."""
