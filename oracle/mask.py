"""Oracle for the CONTRACT area `mask` (standard library only, ragged lists, float64)."""
