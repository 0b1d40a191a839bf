"""Oracle for the CONTRACT area `metrics` (standard library only, ragged lists, float64)."""
