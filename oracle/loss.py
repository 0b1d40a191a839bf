"""Oracle for the CONTRACT area `loss` (standard library only, ragged lists, float64)."""
