"""Oracle for the CONTRACT area `advantage` (standard library only, ragged lists, float64)."""
