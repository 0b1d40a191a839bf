"""Oracle for the CONTRACT area `filter` (standard library only, ragged lists, float64)."""
