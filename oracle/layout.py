"""Oracle for the CONTRACT area `layout` (standard library only, ragged lists, float64)."""
