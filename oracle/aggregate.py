"""Oracle for the CONTRACT area `aggregate` (standard library only, ragged lists, float64)."""
