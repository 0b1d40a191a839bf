"""Oracle for the CONTRACT area `kl` (standard library only, ragged lists, float64)."""
